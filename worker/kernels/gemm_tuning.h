// Whether the kernels' cuBLASLt GEMMs run tuned algorithms (tuned_mm.h, gemm_lt_launch.h: each
// problem's candidates timed once a process and the fastest kept) or the heuristic's first pick,
// and how many of the heuristic's candidates the tuning times. A process-wide setting, as
// LibTorch's cuDNN benchmark flag is: mt-train's --no-gemm-tuning and --gemm-tune-candidates
// (engine::TrainerOptions, which Trainer::Create applies) set it. On, with
// kDefaultGemmTuneCandidates, by default; no effect without CUDA. No LibTorch in this header.
// Thread-safe.
#ifndef MT_WORKER_KERNELS_GEMM_TUNING_H_
#define MT_WORKER_KERNELS_GEMM_TUNING_H_

namespace mt::kernels {

// How many candidates a problem's tuning times by default, and the most it may be asked to. On
// an H100, for every GEMM of the engine bench's three sizes, the fastest of 32 candidates was
// among the first 8, and 32 changed no step time (bench/RESULTS.md, 2026-12-05).
inline constexpr int kDefaultGemmTuneCandidates = 8;
inline constexpr int kMaxGemmTuneCandidates = 64;

void SetGemmTuning(bool on);
bool GemmTuning();

// `candidates` is clamped to [1, kMaxGemmTuneCandidates] (callers check their users' values
// first). Problems already tuned keep their algorithm.
void SetGemmTuneCandidates(int candidates);
int GemmTuneCandidates();

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_GEMM_TUNING_H_
