// The QKV projection's output gradient (qkv_heads_launch.h): dq, dk and dv gathered back into
// the [tokens, heads * 3 * head_dim] layout, with the bias gradient's first pass in the same
// read.
//
// Block (column group g, row chunk k) of kColumnSumWarps warps, as ColumnSum's first pass: lane
// l holds the 16-byte vector of columns g * 32 * kVec + l * kVec, which lies in one head h, one
// of q / k / v and one run of kVec elements of the head dimension; warp w copies the rows
// k * 128 + w, + 8, ... (16 of them, 8 loads in flight at a time). The warps'
// sums meet in shared memory and each column's chunk sum goes to partial[k][c]; ColumnSum's
// second pass adds the chunks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/column_sum.cuh"
#include "worker/kernels/column_sum_launch.h"
#include "worker/kernels/float_convert.cuh"
#include "worker/kernels/qkv_heads_launch.h"

namespace mt::kernels {
namespace {

constexpr int kWarps = kColumnSumWarps;
constexpr int kRowsPerChunk = kColumnSumRowsPerChunk;
constexpr int kRowsPerWarp = kRowsPerChunk / kWarps;  // 16
constexpr int kRowsPerBatch = 8;

struct Grads {
  HeadsGrad g[3];
};

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    QkvGradGatherKernel(Grads grads, QkvShape shape, T* __restrict__ dqkv,
                        float* __restrict__ partial) {
  constexpr int kVec = 16 / sizeof(T);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t rows = shape.batch * shape.seq;
  const int64_t per_head = 3 * shape.head_dim;
  const int64_t cols = shape.heads * per_head;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * 32 + lane) * kVec;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRowsPerChunk + warp;
  float sum[kVec] = {};
  if (col < cols) {
    const int64_t head = col / per_head;
    const int part = static_cast<int>((col - head * per_head) / shape.head_dim);
    const int64_t first = col - head * per_head - part * shape.head_dim;
    // Selected field by field: indexing the parameter array with `part` would copy it to the
    // stack.
    const HeadsGrad& g0 = grads.g[0];
    const HeadsGrad& g1 = grads.g[1];
    const HeadsGrad& g2 = grads.g[2];
    const void* data = part == 0 ? g0.data : part == 1 ? g1.data : g2.data;
    const int64_t batch_stride = part == 0   ? g0.batch_stride
                                 : part == 1 ? g1.batch_stride
                                             : g2.batch_stride;
    const int64_t head_stride = part == 0   ? g0.head_stride
                                : part == 1 ? g1.head_stride
                                            : g2.head_stride;
    const int64_t seq_stride = part == 0   ? g0.seq_stride
                               : part == 1 ? g1.seq_stride
                                           : g2.seq_stride;
    // Row r = row0 + j * kWarps is token (b, t) of the source. The source and destination
    // pointers advance by kWarps rows at a time, so the loop divides nothing (a 64-bit division
    // per row kept the kernel at 1.8x a plain copy's time; now 1.14x, bench/RESULTS.md).
    const int64_t b0 = row0 / shape.seq;
    int64_t t = row0 - b0 * shape.seq;
    const T* src = static_cast<const T*>(data) + head * head_stride + first + b0 * batch_stride +
                   t * seq_stride;
    T* dst = dqkv + row0 * cols + col;
    int64_t r = row0;
    // Two rounds of kRowsPerBatch rows: their loads in flight together, then their stores and
    // sums in row order (ColumnSum's order).
#pragma unroll
    for (int i0 = 0; i0 < kRowsPerWarp; i0 += kRowsPerBatch) {
      Pack<T, kVec> v[kRowsPerBatch];
#pragma unroll
      for (int i = 0; i < kRowsPerBatch; ++i) {
        if (r + i * kWarps < rows) {
          v[i] = *reinterpret_cast<const Pack<T, kVec>*>(src);
        } else {
#pragma unroll
          for (int k = 0; k < kVec; ++k) v[i].v[k] = To<T>(0.0f);
        }
        t += kWarps;
        src += kWarps * seq_stride;
        while (t >= shape.seq) {
          t -= shape.seq;
          src += batch_stride - shape.seq * seq_stride;
        }
      }
#pragma unroll
      for (int i = 0; i < kRowsPerBatch; ++i) {
        if (r < rows) *reinterpret_cast<Pack<T, kVec>*>(dst) = v[i];
        r += kWarps;
        dst += kWarps * cols;
#pragma unroll
        for (int k = 0; k < kVec; ++k) sum[k] += F(v[i].v[k]);
      }
    }
  }
  StoreChunkSums<kVec>(sum, partial, blockIdx.y, cols);
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T>
cudaError_t Launch(FloatKind kind, const HeadsGrad in[3], const QkvShape& shape, void* dqkv,
                   float* partial, void* db, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t rows = shape.batch * shape.seq;
  const int64_t cols = shape.heads * 3 * shape.head_dim;
  const int64_t chunks = ColumnSumChunks(rows);
  if (rows <= 0 || cols <= 0 || shape.head_dim % kVec != 0 || chunks > 65535 || !Aligned(dqkv) ||
      !Aligned(partial) || !Aligned(db)) {
    return cudaErrorInvalidValue;
  }
  Grads grads;
  for (int p = 0; p < 3; ++p) {
    const HeadsGrad& g = in[p];
    if (g.data == nullptr || !Aligned(g.data) || g.batch_stride % kVec != 0 ||
        g.head_stride % kVec != 0 || g.seq_stride % kVec != 0) {
      return cudaErrorInvalidValue;
    }
    grads.g[p] = g;
  }
  const int64_t groups = (cols + 32 * kVec - 1) / (32 * kVec);
  QkvGradGatherKernel<T><<<dim3(static_cast<unsigned>(groups), static_cast<unsigned>(chunks)),
                           kWarps * 32, 0, stream>>>(grads, shape, static_cast<T*>(dqkv), partial);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return LaunchFinishColumns(kind, partial, db, chunks, cols, stream);
}

}  // namespace

cudaError_t LaunchQkvGradGather(FloatKind kind, const HeadsGrad grads[3], const QkvShape& shape,
                                void* dqkv, float* partial, void* db, cudaStream_t stream) {
  switch (kind) {
    case FloatKind::kFloat32:
      return Launch<float>(kind, grads, shape, dqkv, partial, db, stream);
    case FloatKind::kBFloat16:
      return Launch<__nv_bfloat16>(kind, grads, shape, dqkv, partial, db, stream);
    case FloatKind::kFloat16:
      return Launch<__half>(kind, grads, shape, dqkv, partial, db, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
