// Whether the kernels' cuBLASLt GEMMs run tuned algorithms (tuned_mm.h, gemm_lt_launch.h: each
// problem's candidates timed once a process and the fastest kept) or the heuristic's first pick.
// A process-wide setting, as LibTorch's cuDNN benchmark flag is: mt-train's --no-gemm-tuning
// (engine::TrainerOptions::gemm_tuning, which Trainer::Create applies) turns it off. On by
// default; no effect without CUDA. No LibTorch in this header. Thread-safe.
#ifndef MT_WORKER_KERNELS_GEMM_TUNING_H_
#define MT_WORKER_KERNELS_GEMM_TUNING_H_

namespace mt::kernels {

void SetGemmTuning(bool on);
bool GemmTuning();

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_GEMM_TUNING_H_
