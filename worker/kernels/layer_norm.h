// Fused LayerNorm (issue #16): one CUDA kernel for the forward (optionally adding the residual
// first and writing the sum: the pre-LayerNorm block's `x = input + attention` followed by the
// next LayerNorm) and one for the backward (d input, d weight and d bias together, plus the
// residual stream's own gradient added into d input). LibTorch's chain runs the add, the
// LayerNorm, and in backward a d input kernel, a slow d gamma / d beta kernel (3.7 ms of a
// GPT-2 124M step on an H200, bench/RESULTS.md) and the gradient sum of the residual.
//
// Same math as torch's layer_norm: mean and variance (biased) of each row in fp32, y = (x -
// mean) / sqrt(var + eps) * weight + bias, rounded once to the dtype; with a residual the
// LayerNorm reads the sum as stored (rounded to the dtype), as the unfused chain does.
// CUDA tensors of fp32, bf16 or fp16 with hidden <= 16384 take the kernels; anything else (CPU,
// fp64) the eager LibTorch chain, so the same call works everywhere.
#ifndef MT_WORKER_KERNELS_LAYER_NORM_H_
#define MT_WORKER_KERNELS_LAYER_NORM_H_

#include <torch/types.h>

#include <utility>

namespace mt::kernels {

// True when FusedLayerNorm / FusedAddLayerNorm run the CUDA kernels for this input and these
// parameters (a CUDA build, CUDA tensors of one floating dtype, hidden <= 16384).
bool FusedLayerNormAvailable(const torch::Tensor& x, const torch::Tensor& weight);

// LayerNorm over the last dimension of x [..., hidden]; weight and bias [hidden]. Autograd
// into x, weight and bias.
torch::Tensor FusedLayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps);

// {sum, y}: sum = x + residual (same shape), plus residual_bias [hidden] on every row where it
// is defined, y = LayerNorm(sum). Autograd into x, residual, residual_bias, weight and bias (x
// and residual get the same gradient, residual_bias its column sums). residual_bias is a linear
// layer's bias left out of its GEMM (model::GptConfig::fold_linear_bias): its gradient then comes
// from this backward kernel, which writes the rows it sums, instead of another pass over them.
// The kernel adds x, residual and residual_bias in fp32 and rounds once.
//
// dropout_p in (0, 1): sum = x + dropout(residual + residual_bias) (Megatron's
// bias-dropout-add: x the residual stream, `residual` the layer's output added to it), the masks
// drawn inside the kernel from the default CUDA generator (dropout_rng.h: a CUDA graph's replay
// draws as the eager call) and drawn again by the backward, so no mask is stored; residual and
// residual_bias then get dropout's backward of the sum's gradient. Where the kernels do not run,
// LibTorch's dropout (other masks, same distribution).
std::pair<torch::Tensor, torch::Tensor> FusedAddLayerNorm(const torch::Tensor& x,
                                                          const torch::Tensor& residual,
                                                          const torch::Tensor& weight,
                                                          const torch::Tensor& bias, double eps,
                                                          const torch::Tensor& residual_bias = {},
                                                          double dropout_p = 0.0);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_LAYER_NORM_H_
