// Matrix products for the kernels' LibTorch wrappers through cuBLASLt with tuned algorithms
// (gemm_lt_launch.h: each problem's fastest candidate, timed once a process): a training step's
// large GEMMs whose shapes the heuristic's first pick serves less well (on an H200, the GPT-2
// 124M LM head's weight gradient is 16% faster; bench/RESULTS.md, issue #16). CPU tensors, other
// dtypes, and tensors that carry autograd take LibTorch's mm.
#ifndef MT_WORKER_KERNELS_TUNED_MM_H_
#define MT_WORKER_KERNELS_TUNED_MM_H_

#include <torch/types.h>

#include <cstddef>

#include "worker/kernels/gemm_tuning.h"  // whether they tune

#if MT_KERNELS_WITH_CUDA
#include "worker/kernels/gemm_lt_launch.h"
#endif

namespace mt::kernels {

// a [M, K] b [K, N] = [M, N], fresh and contiguous. On CUDA for fp32, bf16 and fp16 (both of one
// dtype and device, each contiguous or the transpose of a contiguous matrix, neither needing a
// gradient) through cuBLASLt with the process's tuned algorithms; elsewhere torch::mm. fp32
// accumulates in fp32 (no TF32), as LibTorch's default does.
torch::Tensor TunedMm(const torch::Tensor& a, const torch::Tensor& b);

// scale (a one-element tensor on a's device) x a b, on TunedMm's terms: through cuBLASLt the
// scale multiplies the fp32 product before its one rounding, read from the device (no host
// sync, no pass over the output; 16-bit operands keep no rounded copy of a scaled operand);
// elsewhere torch::mm(a, b) * scale.
torch::Tensor TunedMm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& scale);

// bias [N] + a [M, K] b [K, N] = [M, N] (bias added to every row), fresh and contiguous: what
// torch::addmm(bias, a, b) computes, on the same terms as TunedMm, with the bias added in
// cuBLASLt's epilogue (bias contiguous, 16-byte aligned, of a's dtype and device, needing no
// gradient); elsewhere torch::addmm. The linears with a bias of a training step (the attention's
// QKV and output projections) run their forward through it and their backward through TunedMm.
torch::Tensor TunedAddmm(const torch::Tensor& bias, const torch::Tensor& a, const torch::Tensor& b);

// What the process's tuning has done so far: the cuBLASLt problems it timed (every problem of
// TunedMm and TunedAddmm, the MLP's, the attention's linears' and the LM head's GEMMs first met
// outside a capture with tuning on), how many of them now run another algorithm than
// cuBLASLt's first pick, and how many run with the workspace (gemm_tuning.h). Zeros without CUDA.
struct GemmTuningCounts {
  size_t problems = 0;
  size_t moved = 0;
  size_t with_workspace = 0;
};
GemmTuningCounts GemmTuningSoFar();

#if MT_KERNELS_WITH_CUDA
// The process's table of tuned cuBLASLt algorithms. One per process, like LibTorch's cuBLAS
// handles: the fastest algorithm for a problem is a fact about the GPU and the library, the same
// for every caller, and timing it again per caller would only cost time.
LtTuning& ProcessLtTuning();

// LtMatmul on the current stream of `like`'s device, in `like`'s dtype, with the process's
// tuning and LibTorch's cuBLASLt workspace for that stream (LibTorch 2.9 and later; before, one
// from the caching allocator), optional for the products and forward epilogues unless
// GemmWorkspace() (gemm_tuning.h). Returns LtMatmul's status.
int TunedLtMatmul(LtMatmulArgs args, const torch::Tensor& like);
#endif

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_TUNED_MM_H_
