// A bias's gradient: the sum of the output gradient's rows, and the linear layer whose backward
// uses it. LibTorch's generic reduction (what `sum(0)` and the backward of addmm's broadcast
// bias run) took 2.68 ms of a GPT-2 124M step on the H200 for 49 calls, about half the memory's
// bandwidth. Measured on 2026-12-03 (bench/RESULTS.md): this kernel's first pass reads at
// 3.4 TB/s (1.61 ms for the same sums), but its second pass, a thread a column adding 256
// chunks, costs 0.98 ms: 2.58 ms in all, no real gain yet.
#ifndef MT_WORKER_KERNELS_COLUMN_SUM_H_
#define MT_WORKER_KERNELS_COLUMN_SUM_H_

#include <torch/types.h>

namespace mt::kernels {

// x [rows, cols] -> [cols] in x's dtype: x.sum(0), accumulated in fp32 and rounded once (what
// LibTorch does for 16-bit sums too). CUDA kernel for contiguous fp32 / bf16 / fp16 x whose
// rows are whole 16-byte vectors; elsewhere x.sum(0). Deterministic. No autograd.
torch::Tensor ColumnSum(const torch::Tensor& x);

// x [N, in] w^T + b (w [out, in], b [out]), what torch::addmm(b, x, w.t()) computes (the bias
// in the GEMM's epilogue), with a backward of two GEMMs and ColumnSum for b's gradient; the
// GEMMs are TunedAddmm's and TunedMm's (tuned_mm.h). All three need gradients or none; x 2-D.
torch::Tensor LinearWithBias(const torch::Tensor& x, const torch::Tensor& w,
                             const torch::Tensor& b);

// x [N, in] w^T with LinearWithBias's GEMMs and no bias: a linear whose bias is added, and its
// gradient summed, by the kernel its output goes to (FusedAddLayerNorm's residual_bias).
torch::Tensor LinearWithoutBias(const torch::Tensor& x, const torch::Tensor& w);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_COLUMN_SUM_H_
