// The CUDA side of qkv_heads.h: plain pointers, no LibTorch (keeps nvcc off its headers).
#ifndef MT_WORKER_KERNELS_QKV_HEADS_LAUNCH_H_
#define MT_WORKER_KERNELS_QKV_HEADS_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/float_kind.h"

namespace mt::kernels {

// One of the attention's input gradients, dq, dk or dv [batch, heads, seq, head_dim], by its
// element strides (the last dimension's is 1).
struct HeadsGrad {
  const void* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
  int64_t seq_stride = 0;
};

// The shape of the QKV projection's output [batch * seq, heads * 3 * head_dim], laid out per
// head as q, k, v (Megatron's interleaved layout).
struct QkvShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

// dqkv[r][h * 3d + p * d + i] = grad[p][b][h][t][i] (r = b * seq + t; p = 0, 1, 2 for q, k, v),
// and db[c] = the sum of dqkv's column c over its rows, accumulated in fp32 in the order
// ColumnSum adds (the same bits), rounded once to `kind`; `partial` holds ColumnSumChunks(rows)
// x cols floats (column_sum_launch.h). Every pointer 16-byte aligned, head_dim and the strides
// multiples of 16 / sizeof(element).
cudaError_t LaunchQkvGradGather(FloatKind kind, const HeadsGrad grads[3], const QkvShape& shape,
                                void* dqkv, float* partial, void* db, cudaStream_t stream);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_QKV_HEADS_LAUNCH_H_
