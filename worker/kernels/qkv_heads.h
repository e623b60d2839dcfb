// The attention's QKV projection as one autograd node: x [b, s, in] -> q, k, v [b, heads, s, d],
// views of x w^T + b laid out per head as q, k, v (Megatron's layout, what
// model::SelfAttention splits). In backward, LibTorch's split and transposes would concatenate
// dq, dk and dv into the projection's output gradient (a copy kernel, 0.96 ms of a GPT-2 124M
// step on an H200) and the bias gradient would read that again (ColumnSum). Here one kernel does
// both in one read: the gather and the bias gradient's first pass (qkv_heads_kernel.cu), then
// the two GEMMs of a linear layer's backward.
#ifndef MT_WORKER_KERNELS_QKV_HEADS_H_
#define MT_WORKER_KERNELS_QKV_HEADS_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace mt::kernels {

// True when QkvHeads is the path to take: a CUDA build, CUDA tensors of one dtype (fp32, bf16
// or fp16) that all need gradients under grad mode, x [b, s, in], w [heads * 3d, in], b
// [heads * 3d], head_dim a whole number of 16-byte vectors.
bool QkvHeadsAvailable(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                       int64_t heads, int64_t head_dim);

// {q, k, v}, each [b, heads, s, head_dim], of x w^T + b viewed as [b, s, heads, 3 * head_dim],
// with autograd into x, w and b. Backward runs the gather kernel where the gradients' strides
// allow it and CUDA is there; elsewhere (CPU, other strides) the same sums through LibTorch
// (cat, then ColumnSum). The GEMMs are TunedAddmm's (forward) and TunedMm's (tuned_mm.h).
std::vector<torch::Tensor> QkvHeads(const torch::Tensor& x, const torch::Tensor& w,
                                    const torch::Tensor& b, int64_t heads, int64_t head_dim);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_QKV_HEADS_H_
