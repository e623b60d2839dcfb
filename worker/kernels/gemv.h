// A linear layer for a few rows (issue #17): y = act(x w^T + bias) with x [..., in] of at most
// 8 rows (4 in fp32), the shape of every linear layer of a decode step at batch <= 8. Such a
// step reads each weight once per token, so its time is the weights' bytes over memory
// bandwidth; cuBLAS's kernels for a few rows read a GPT-2 1.3B's layers at about half of an
// H200's bandwidth (bench/RESULTS.md, 2026-12-03). The kernels (gemv_kernel.cu) stream the
// weight rows (CUDA cores for one row and for fp32, tensor cores for 2 to 8 rows of bf16 or
// fp16), products and sums in fp32, the bias and an optional tanh GELU applied before the one
// rounding to the dtype; each starts streaming while the kernel before it finishes (a dependent
// launch).
//
// CUDA tensors of fp32, bf16 or fp16 (x, weight and bias of one dtype), in a multiple of 16
// bytes' elements, 16-byte aligned, and no autograd to record (inference, or under
// torch::NoGradGuard) take the kernel; anything else LibTorch's linear (and GELU), so the same
// call works everywhere. The kernel reads the weight while the kernel before it in the stream
// may still run (x and bias only after it ends): a weight is written well before the layers
// that read it (loading, quantizing, an optimizer step), never by that kernel.
#ifndef MT_WORKER_KERNELS_GEMV_H_
#define MT_WORKER_KERNELS_GEMV_H_

#include <torch/types.h>

#include <utility>

namespace mt::kernels {

// True when Gemv runs the CUDA kernel for this input and weight [out, in] (see above).
bool GemvAvailable(const torch::Tensor& x, const torch::Tensor& weight);

// act(x weight^T + bias): x [..., in] -> [..., out] in x's dtype; bias [out] or undefined; act
// = tanh-approximated GELU with `gelu`, else the identity. No autograd on the kernel path
// (GemvAvailable is false where autograd would record).
torch::Tensor Gemv(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                   bool gelu = false);

// True when NormGemv runs one kernel for this x [..., in], LayerNorm weight [in] and linear
// weight [out, in]: GemvAvailable, one row (a decode step at batch 1: each block normalises the
// row again, which costs more than it saves past one row), `in` up to 8,192 bf16 values.
bool NormGemvAvailable(const torch::Tensor& x, const torch::Tensor& norm_weight,
                       const torch::Tensor& weight);

// {sum, act(LayerNorm(sum) weight^T + bias)} with sum = x + residual (x itself when residual is
// undefined): what FusedAddLayerNorm (or FusedLayerNorm) and then Gemv compute, in one kernel
// where NormGemvAvailable and the LayerNorm's parameters are CUDA tensors of x's dtype (each
// block normalises the row itself: no LayerNorm kernel between two GEMVs of a decode step);
// otherwise those two calls. No autograd on the kernel path.
std::pair<torch::Tensor, torch::Tensor> NormGemv(const torch::Tensor& x,
                                                 const torch::Tensor& residual,
                                                 const torch::Tensor& norm_weight,
                                                 const torch::Tensor& norm_bias, double eps,
                                                 const torch::Tensor& weight,
                                                 const torch::Tensor& bias, bool gelu = false);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_GEMV_H_
