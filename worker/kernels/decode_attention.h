// Decode attention (issue #17): one CUDA kernel per layer of a static-shape decode step
// (worker/generate/decode_step.h) that writes the new token's key and value into the layer's
// KV cache at the position held on the device and attends over the live entries [0, position]
// only, flash-decoding style (the entries split across blocks, then merged). It replaces two
// index_copy_ kernels plus SDPA over the whole max_len cache with an additive mask; no host
// value, no shape that follows the position, so a CUDA graph captures it.
//
// Math: softmax(q k^T / sqrt(d)) v with the products, the softmax and the weighted sum in fp32,
// rounded once to the dtype (SDPA's math path rounds the probabilities to the dtype first).
// CUDA tensors of fp32, bf16 or fp16 with head_dim a multiple of 8 in [32, 256], 16-byte
// aligned (DecodeAttentionAvailable) take the kernel; anything else (CPU, fp64, other head
// dims) runs index_copy_ and the masked math in fp32 with LibTorch, so the call works
// everywhere. No autograd: inference only.
#ifndef MT_WORKER_KERNELS_DECODE_ATTENTION_H_
#define MT_WORKER_KERNELS_DECODE_ATTENTION_H_

#include <torch/types.h>

namespace mt::kernels {

// True when DecodeAttention runs the CUDA kernel for these tensors (see DecodeAttention for
// their shapes): a CUDA build, every tensor on one CUDA device, q / k_new / v_new and the caches
// of one dtype among fp32, bf16 and fp16, head_dim supported, the head dims of q / k_new / v_new
// contiguous, their other strides and every address 16-byte aligned, the caches contiguous and
// `position` one int64.
bool DecodeAttentionAvailable(const torch::Tensor& q, const torch::Tensor& k_new,
                              const torch::Tensor& v_new, const torch::Tensor& position,
                              const torch::Tensor& k_cache, const torch::Tensor& v_cache);

// q, k_new, v_new [b, 1, heads, d] (any strides: the split views of a fused QKV output);
// position: one int64 p on the caches' device, in [0, max_len); k_cache, v_cache
// [b, heads, max_len, d]. Writes k_new and v_new into the caches at entry p (in place) and
// returns the context [b, 1, heads * d] in q's dtype (contiguous: what
// attention(q, k, v).transpose(1, 2).reshape({b, 1, heads * d}) gives), attending over the cache
// entries [0, p]. On the kernel path a p outside [0, max_len) is clamped into it. Throws
// c10::Error for shapes that do not match.
torch::Tensor DecodeAttention(const torch::Tensor& q, const torch::Tensor& k_new,
                              const torch::Tensor& v_new, const torch::Tensor& position,
                              const torch::Tensor& k_cache, const torch::Tensor& v_cache);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_DECODE_ATTENTION_H_
