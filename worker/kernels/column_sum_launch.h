// The CUDA side of column_sum.h: plain pointers, no LibTorch (keeps nvcc off its headers).
#ifndef MT_WORKER_KERNELS_COLUMN_SUM_LAUNCH_H_
#define MT_WORKER_KERNELS_COLUMN_SUM_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/float_kind.h"

namespace mt::kernels {

// The first pass: a block of kColumnSumWarps warps sums a chunk of kColumnSumRowsPerChunk rows,
// warp w the rows w, w + kColumnSumWarps, ... of it in that order (kernels that fuse the first
// pass into their own, qkv_heads_kernel.cu, keep this order and so the same bits).
inline constexpr int kColumnSumWarps = 8;
inline constexpr int kColumnSumRowsPerChunk = 128;

// Row chunks of the first pass: `partial` holds ColumnSumChunks(rows) x cols floats.
int64_t ColumnSumChunks(int64_t rows);

// out[c] = sum over r of x[r][c] (x contiguous rows x cols of `kind`, 16-byte aligned, cols a
// multiple of 16 / sizeof(element)), accumulated in fp32 and rounded once to `kind`: each block
// sums a chunk of rows for 32 vectors of columns into `partial`, then one thread a column adds
// the chunks in order (deterministic).
cudaError_t LaunchColumnSum(FloatKind kind, const void* x, void* out, float* partial, int64_t rows,
                            int64_t cols, cudaStream_t stream);

// ColumnSum's second pass alone, for kernels that write the first pass's `partial` themselves
// (qkv_heads_kernel.cu): out[c] = the sum of partial[k][c] over k < chunks, in order.
cudaError_t LaunchFinishColumns(FloatKind kind, const float* partial, void* out, int64_t chunks,
                                int64_t cols, cudaStream_t stream);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_COLUMN_SUM_LAUNCH_H_
