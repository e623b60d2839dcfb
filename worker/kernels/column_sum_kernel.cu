// ColumnSum (column_sum_launch.h): a bias's gradient, the sum of the output gradient's rows.
//
// Pass 1: block (column group g, y) of 8 warps sums row chunk k = chunks - 1 - y: the last rows
// first, so that the blocks scheduled first find the rows a GEMM wrote last still in L2 (the
// gradient is summed right after the GEMM that writes it, fused_mlp.cc). Lane l holds the
// 16-byte vector of columns g * 32 * kVec + l * kVec, warp w the rows k * 128 + w, + 8, ... (16 of
// them, all loads issued before the sums); the 8 warps' sums meet in shared memory and the
// chunk's sum of each column goes to partial[k][c], so the order changes no bits. Pass 2 adds the
// chunks of each column in a fixed order (FinishColumnsKernel).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "worker/kernels/column_sum.cuh"
#include "worker/kernels/column_sum_launch.h"
#include "worker/kernels/dependent_launch.cuh"
#include "worker/kernels/float_convert.cuh"

namespace mt::kernels {
namespace {

constexpr int kWarps = kColumnSumWarps;
constexpr int kRowsPerChunk = kColumnSumRowsPerChunk;
constexpr int kRowsPerWarp = kRowsPerChunk / kWarps;  // 16
constexpr int kFinishThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    ChunkSumKernel(const T* __restrict__ x, float* __restrict__ partial, int64_t rows,
                   int64_t cols) {
  constexpr int kVec = 16 / sizeof(T);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * 32 + lane) * kVec;
  const int64_t chunk = static_cast<int64_t>(gridDim.y) - 1 - blockIdx.y;
  const int64_t row0 = chunk * kRowsPerChunk + warp;
  float sum[kVec] = {};
  if (col < cols) {
    Pack<T, kVec> v[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int64_t r = row0 + static_cast<int64_t>(i) * kWarps;
      if (r < rows) {
        v[i] = *reinterpret_cast<const Pack<T, kVec>*>(x + r * cols + col);
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[i].v[k] = To<T>(0.0f);
      }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) sum[k] += F(v[i].v[k]);
    }
  }
  StoreChunkSums<kVec>(sum, partial, chunk, cols);
}

// Pass 2: block b adds the chunks of columns b * 32 .. + 31: lane l takes column b * 32 + l
// (a warp reads 128 contiguous bytes a chunk), warp w the chunks w, w + 8, ...; then the eight
// warps' sums in order.
template <typename T>
__global__ void __launch_bounds__(kFinishThreads)
    FinishColumnsKernel(const float* __restrict__ partial, T* __restrict__ out, int64_t chunks,
                        int64_t cols) {
  constexpr int kFinishWarps = kFinishThreads / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  WaitForPrerequisites();
  float s = 0.0f;
  if (c < cols) {
#pragma unroll 8
    for (int64_t k = warp; k < chunks; k += kFinishWarps) s += partial[k * cols + c];
  }
  __shared__ float sums[kFinishWarps][32];
  sums[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && c < cols) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kFinishWarps; ++w) total += sums[w][lane];
    out[c] = To<T>(total);
  }
}

// Launched as a dependent of the first pass (dependent_launch.cuh): scheduled as that pass's
// blocks finish (StoreChunkSums allows it), it reads `partial` only after the pass has ended.
template <typename T>
cudaError_t LaunchFinish(const float* partial, void* out, int64_t chunks, int64_t cols,
                         cudaStream_t stream) {
  return LaunchDependent(FinishColumnsKernel<T>, dim3(static_cast<unsigned>((cols + 31) / 32)),
                         dim3(kFinishThreads), 0, stream, partial, static_cast<T*>(out), chunks,
                         cols);
}

template <typename T>
cudaError_t Launch(const void* x, void* out, float* partial, int64_t rows, int64_t cols,
                   cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t chunks = ColumnSumChunks(rows);
  const int64_t groups = (cols + 32 * kVec - 1) / (32 * kVec);
  if (rows <= 0 || cols <= 0 || cols % kVec != 0 || chunks > 65535) return cudaErrorInvalidValue;
  ChunkSumKernel<T><<<dim3(static_cast<unsigned>(groups), static_cast<unsigned>(chunks)),
                      kWarps * 32, 0, stream>>>(static_cast<const T*>(x), partial, rows, cols);
  return LaunchFinish<T>(partial, out, chunks, cols, stream);
}

}  // namespace

int64_t ColumnSumChunks(int64_t rows) { return (rows + kRowsPerChunk - 1) / kRowsPerChunk; }

cudaError_t LaunchColumnSum(FloatKind kind, const void* x, void* out, float* partial, int64_t rows,
                            int64_t cols, cudaStream_t stream) {
  switch (kind) {
    case FloatKind::kFloat32:
      return Launch<float>(x, out, partial, rows, cols, stream);
    case FloatKind::kBFloat16:
      return Launch<__nv_bfloat16>(x, out, partial, rows, cols, stream);
    case FloatKind::kFloat16:
      return Launch<__half>(x, out, partial, rows, cols, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchFinishColumns(FloatKind kind, const float* partial, void* out, int64_t chunks,
                                int64_t cols, cudaStream_t stream) {
  if (chunks <= 0 || cols <= 0) return cudaErrorInvalidValue;
  switch (kind) {
    case FloatKind::kFloat32:
      return LaunchFinish<float>(partial, out, chunks, cols, stream);
    case FloatKind::kBFloat16:
      return LaunchFinish<__nv_bfloat16>(partial, out, chunks, cols, stream);
    case FloatKind::kFloat16:
      return LaunchFinish<__half>(partial, out, chunks, cols, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
