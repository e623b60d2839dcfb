// Causal attention whose backward writes dq, dk and dv straight into the QKV projection's
// output gradient (issue #16). LibTorch's cuDNN attention hands the gradients of q, k, v back as
// three compact [b, heads, s, d] tensors, and QkvHeads' backward gathers them into the
// projection's [b, s, heads, 3d] gradient (a read and a write of three [tokens, hidden] tensors:
// 1.0 ms of a GPT-2 124M step on an H200). Here the backward hands cuDNN's SDPA backward
// (at::native::run_cudnn_SDP_bprop, what LibTorch's own _cudnn_attention_backward calls) views
// of one [b, s, heads, 3d] tensor as dQ, dK and dV; QkvHeads then takes that tensor as it is
// (qkv_heads.h: PackedQkvViews) and only sums its columns for the bias.
//
// The forward is LibTorch's (at::_scaled_dot_product_cudnn_attention: the same kernel, the
// same bits) and the backward runs the same cuDNN kernels with other output strides.
//
// LibTorch's cache of cuDNN backward graphs tells graphs apart by the layouts of q, k, v, the
// output and its gradient, not of dQ, dK, dV, and builds each graph with its first caller's. So
// in a process that runs this backward, LibTorch's own cuDNN backward must not run on q, k, v
// laid out as PackedQkvViews: it would write dQ with these strides into a compact buffer.
// model::CausalAttention therefore sends every such call that LibTorch would give to cuDNN
// here (PackedCausalAttentionTakes); tests compare against LibTorch on compact copies.
#ifndef MT_WORKER_KERNELS_PACKED_ATTENTION_H_
#define MT_WORKER_KERNELS_PACKED_ATTENTION_H_

#include <torch/types.h>

namespace mt::kernels {

// Whether this build can run PackedCausalAttention: a CUDA LibTorch whose cuDNN SDPA backward
// this code calls (2.5 and later, with ATen/native/cudnn/MHA.h).
bool PackedCausalAttentionBuilt();

// True when PackedCausalAttention takes these inputs: built, grad mode on and q, k, v all
// needing gradients, PackedQkvViews(q, k, v), and LibTorch's scaled_dot_product_attention
// would itself run cuDNN's kernels for them (causal, this dropout, the SDPA switches as they
// are now: at::_fused_sdp_choice).
bool PackedCausalAttentionTakes(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, double dropout_p);

// at::scaled_dot_product_attention(q, k, v, {}, dropout_p, /*is_causal=*/true), q, k, v [b,
// heads, s, d], with autograd into q, k and v whose gradients are views of one [b, s, heads, 3d]
// tensor. Throws where PackedCausalAttentionTakes is false.
torch::Tensor PackedCausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, double dropout_p);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_PACKED_ATTENTION_H_
