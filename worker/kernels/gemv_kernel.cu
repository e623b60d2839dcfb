// See gemv.h. One warp per output feature: each lane streams 16 bytes of the weight row at a
// time (a cache-streaming load: the weight is read once per launch and should not push x out
// of L1), four loads in flight, and reads the matching elements of every row of x (small, shared
// by every warp through L1/L2); one fp32 sum per row, reduced over the warp at the end.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "worker/kernels/float_convert.cuh"
#include "worker/kernels/gemv_launch.h"

namespace mt::kernels {
namespace {

constexpr int kWarps = 8;  // output features per block
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 4;  // 16-byte weight loads a lane keeps in flight

template <typename T, int kRows>
__global__ void __launch_bounds__(kThreads)
    GemvKernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
               bool gelu, T* __restrict__ y, int rows, int64_t out, int64_t in) {
  constexpr int kVec = 16 / sizeof(T);
  using P = Pack<T, kVec>;
  const int lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (j >= out) return;
  const int4* wj = reinterpret_cast<const int4*>(w + j * in);
  const int64_t npacks = in / kVec;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
  for (int64_t base = lane; base < npacks; base += 32 * kUnroll) {
    int4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = base + 32 * u;
      if (p < npacks) raw[u] = __ldcs(wj + p);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = base + 32 * u;
      if (p >= npacks) break;
      const P wp = *reinterpret_cast<const P*>(&raw[u]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) break;
        const P xp = reinterpret_cast<const P*>(x + r * in)[p];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[r] = fmaf(F(xp.v[e]), F(wp.v[e]), acc[r]);
      }
    }
  }
  const float b = bias != nullptr ? F(bias[j]) : 0.0f;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float total = WarpSum(acc[r]);
    if (lane == 0 && r < rows) {
      const float v = total + b;
      y[r * out + j] = To<T>(gelu ? GeluTanh(v) : v);
    }
  }
}

template <typename T, int kRows>
cudaError_t LaunchRows(const void* x, const void* w, const void* bias, bool gelu, void* y,
                       int64_t rows, int64_t out, int64_t in, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((out + kWarps - 1) / kWarps);
  GemvKernel<T, kRows><<<blocks, kThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias), gelu,
      static_cast<T*>(y), static_cast<int>(rows), out, in);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchTyped(const void* x, const void* w, const void* bias, bool gelu, void* y,
                        int64_t rows, int64_t out, int64_t in, cudaStream_t stream) {
  if (rows <= 1) return LaunchRows<T, 1>(x, w, bias, gelu, y, rows, out, in, stream);
  if (rows <= 2) return LaunchRows<T, 2>(x, w, bias, gelu, y, rows, out, in, stream);
  return LaunchRows<T, 4>(x, w, bias, gelu, y, rows, out, in, stream);
}

}  // namespace

cudaError_t LaunchGemv(FloatKind kind, const void* x, const void* w, const void* bias, bool gelu,
                       void* y, int64_t rows, int64_t out, int64_t in, cudaStream_t stream) {
  if (rows < 1 || rows > kGemvMaxRows) return cudaErrorInvalidValue;
  if (out == 0) return cudaSuccess;
  switch (kind) {
    case FloatKind::kBFloat16:
      return LaunchTyped<__nv_bfloat16>(x, w, bias, gelu, y, rows, out, in, stream);
    case FloatKind::kFloat16:
      return LaunchTyped<__half>(x, w, bias, gelu, y, rows, out, in, stream);
    case FloatKind::kFloat32:
      return LaunchTyped<float>(x, w, bias, gelu, y, rows, out, in, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
