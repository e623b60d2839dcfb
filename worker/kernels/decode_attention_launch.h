// The CUDA side of decode_attention.h: plain pointers, no LibTorch (keeps nvcc off its headers).
// q, k_new and v_new are one token per (row, head): head_dim contiguous elements at
// base + row * batch_stride + head * head_stride (in elements; the split views of a fused QKV
// output qualify). The caches are contiguous [batch, heads, max_len, head_dim]; `out` is
// contiguous [batch, heads * head_dim]; all of one FloatKind. Every pointer is 16-byte aligned
// and every stride a multiple of 16 bytes' worth of elements (the caller checks).
#ifndef MT_WORKER_KERNELS_DECODE_ATTENTION_LAUNCH_H_
#define MT_WORKER_KERNELS_DECODE_ATTENTION_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/float_kind.h"

namespace mt::kernels {

// The head dims the kernel takes: multiples of 8 in [32, 256].
inline constexpr int64_t kDecodeAttentionMinHeadDim = 32;
inline constexpr int64_t kDecodeAttentionMaxHeadDim = 256;
inline bool DecodeAttentionHeadDimSupported(int64_t head_dim) {
  return head_dim % 8 == 0 && head_dim >= kDecodeAttentionMinHeadDim &&
         head_dim <= kDecodeAttentionMaxHeadDim;
}

struct DecodeAttentionArgs {
  const void* q = nullptr;
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  int64_t q_batch_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_head_stride = 0;
  const int64_t* position = nullptr;  // one int64 on the device
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  void* out = nullptr;
  // fp32 scratch of DecodeAttentionScratchFloats(...) elements (null when that is 0).
  float* partial = nullptr;
  int64_t batch = 0, heads = 0, max_len = 0, head_dim = 0;
  int splits = 1;  // DecodeAttentionSplits(batch, heads, max_len, SMs)
};

// How many blocks share the keys of one (row, head): enough blocks for about four per SM, at
// most one per 64 cache entries and at most 128. Depends only on the static shapes.
int DecodeAttentionSplits(int64_t batch, int64_t heads, int64_t max_len, int sm_count);

// fp32 elements of the scratch: per (row, head, split) the unnormalised output [head_dim] and
// the running max and sum of the softmax; 0 with one split (no combine step).
int64_t DecodeAttentionScratchFloats(int64_t batch, int64_t heads, int64_t head_dim, int splits);

// With p = *position (clamped to [0, max_len)): writes k_new and v_new at entry p of every
// (row, head) of the caches, and out = softmax(q k^T / sqrt(head_dim)) v over the entries
// [0, p] (the new token's k and v taken from k_new / v_new), products, softmax and sums in
// fp32, rounded once to the kind. No host synchronisation: capturable in a CUDA graph.
cudaError_t LaunchDecodeAttention(FloatKind kind, const DecodeAttentionArgs& args,
                                  cudaStream_t stream);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_DECODE_ATTENTION_LAUNCH_H_
