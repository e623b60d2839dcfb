// The end of ColumnSum's first pass, for the kernels that run it (column_sum_kernel.cu) or fuse
// it into their own pass over a gradient (qkv_heads_kernel.cu); nvcc only. A block of
// kColumnSumWarps warps, lane l of each holding the fp32 sums of the kVec columns
// blockIdx.x * 32 * kVec + l * kVec, .. over that warp's rows of row chunk `chunk`: the warps'
// sums are added in warp order (the same bits whichever kernel ran the pass) and written to
// partial[chunk][column].
#ifndef MT_WORKER_KERNELS_COLUMN_SUM_CUH_
#define MT_WORKER_KERNELS_COLUMN_SUM_CUH_

#include <cstdint>

#include "worker/kernels/column_sum_launch.h"
#include "worker/kernels/dependent_launch.cuh"

namespace mt::kernels {

template <int kVec>
__device__ __forceinline__ void StoreChunkSums(const float (&sum)[kVec],
                                               float* __restrict__ partial, int64_t chunk,
                                               int64_t cols) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  AllowDependents();  // the second pass may be scheduled; it reads `partial` after this grid
  __shared__ float sums[kColumnSumWarps][32 * kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) sums[warp][lane * kVec + k] = sum[k];
  __syncthreads();
  for (int c = threadIdx.x; c < 32 * kVec; c += blockDim.x) {
    const int64_t at = static_cast<int64_t>(blockIdx.x) * 32 * kVec + c;
    if (at >= cols) continue;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kColumnSumWarps; ++w) s += sums[w][c];
    partial[chunk * cols + at] = s;
  }
}

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_COLUMN_SUM_CUH_
