// Where the fused MLP's training forward applies fc1's bias and GELU (kernels::FusedMlp): in the
// fc1 GEMM's cuBLASLt epilogue (GELU_AUX_BIAS: the GEMM writes the activation and the
// pre-activation), or the GEMM with the bias epilogue writing the pre-activation and a GELU
// kernel over it. The epilogue writes one tensor fewer but slows the GEMM: on an H100,
// GPT-2 350M's fc1 took 0.265 ms with it against 0.171 for the GEMM alone, and the GELU kernel
// over the [16,384, 4,096] pre-activation in bf16 (268 MB moved) ~0.09 ms at the H100's memory
// speed, less at an H200's (bench/RESULTS.md, 2026-12-07). Which is faster depends on the
// shape and the GPU, so kAuto times both once a process per shape (mlp_gelu_choice.h).
// Torch-free: model::GptConfig holds it.
#ifndef MT_WORKER_KERNELS_MLP_GELU_H_
#define MT_WORKER_KERNELS_MLP_GELU_H_

namespace mt::kernels {

enum class MlpGelu {
  kAuto,      // the faster of the two for the shape, timed on its first call outside a capture
  kEpilogue,  // GELU_AUX_BIAS in the fc1 GEMM
  kKernel,    // the bias epilogue, then a GELU kernel
};

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_MLP_GELU_H_
