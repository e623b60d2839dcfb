// See int8_linear.h. One warp per output feature: each lane reads 16 int8 weights at a time
// (one 16-byte load) and the matching 16 elements of every row of x (small, and shared by every
// warp through L1/L2), keeps one fp32 sum per row, and the warp reduces them at the end. The
// weight is read exactly once per launch, which is what bounds a decode step. The dequantize
// kernel (more rows than the GEMV takes) writes q * scale in the dtype for a GEMM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "worker/kernels/float_convert.cuh"
#include "worker/kernels/int8_linear_launch.h"

namespace mt::kernels {
namespace {

constexpr int kWarps = 8;  // output features per block
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 16;  // weights per lane per load

// sum_c x[c] * w[c] over one chunk of 16 elements of a row of x.
template <typename T>
__device__ __forceinline__ float ChunkDot(const T* x, const float (&w)[kChunk]) {
  constexpr int kVec = 16 / sizeof(T);
  using P = Pack<T, kVec>;
  float s = 0.0f;
#pragma unroll
  for (int p = 0; p < kChunk / kVec; ++p) {
    const P pk = reinterpret_cast<const P*>(x)[p];
#pragma unroll
    for (int e = 0; e < kVec; ++e) s = fmaf(F(pk.v[e]), w[p * kVec + e], s);
  }
  return s;
}

template <typename T, int kRows>
__global__ void __launch_bounds__(kThreads)
    Int8GemvKernel(const T* __restrict__ x, const int8_t* __restrict__ q,
                   const float* __restrict__ scale, const T* __restrict__ bias, bool gelu,
                   T* __restrict__ y, int rows, int64_t out, int64_t in) {
  const int lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (j >= out) return;
  const int8_t* qj = q + j * in;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
#pragma unroll 4
  for (int64_t i = static_cast<int64_t>(lane) * kChunk; i < in; i += 32 * kChunk) {
    const Pack<int8_t, kChunk> packed = *reinterpret_cast<const Pack<int8_t, kChunk>*>(qj + i);
    float w[kChunk];
#pragma unroll
    for (int c = 0; c < kChunk; ++c) w[c] = static_cast<float>(packed.v[c]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < rows) acc[r] += ChunkDot(x + r * in + i, w);
    }
  }
  const float s = scale[j];
  const float b = bias != nullptr ? F(bias[j]) : 0.0f;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float total = WarpSum(acc[r]);
    if (lane == 0 && r < rows) {
      const float v = fmaf(total, s, b);
      y[r * out + j] = To<T>(gelu ? GeluTanh(v) : v);
    }
  }
}

template <typename T, int kRows>
cudaError_t LaunchRows(const void* x, const int8_t* q, const float* scale, const void* bias,
                       bool gelu, void* y, int64_t rows, int64_t out, int64_t in,
                       cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((out + kWarps - 1) / kWarps);
  Int8GemvKernel<T, kRows><<<blocks, kThreads, 0, stream>>>(
      static_cast<const T*>(x), q, scale, static_cast<const T*>(bias), gelu, static_cast<T*>(y),
      static_cast<int>(rows), out, in);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchTyped(const void* x, const int8_t* q, const float* scale, const void* bias,
                        bool gelu, void* y, int64_t rows, int64_t out, int64_t in,
                        cudaStream_t stream) {
  if (rows <= 1) return LaunchRows<T, 1>(x, q, scale, bias, gelu, y, rows, out, in, stream);
  if (rows <= 2) return LaunchRows<T, 2>(x, q, scale, bias, gelu, y, rows, out, in, stream);
  return LaunchRows<T, 4>(x, q, scale, bias, gelu, y, rows, out, in, stream);
}

// One thread per 16 weights (one 16-byte load of q).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    DequantizeKernel(const int8_t* __restrict__ q, const float* __restrict__ scale,
                     T* __restrict__ w, int64_t chunks_per_row, int64_t chunks) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= chunks) return;
  const Pack<int8_t, kChunk> packed = reinterpret_cast<const Pack<int8_t, kChunk>*>(q)[c];
  const float s = scale[c / chunks_per_row];
  constexpr int kVec = 16 / sizeof(T);
  using P = Pack<T, kVec>;
#pragma unroll
  for (int p = 0; p < kChunk / kVec; ++p) {
    P out;
#pragma unroll
    for (int e = 0; e < kVec; ++e) out.v[e] = To<T>(static_cast<float>(packed.v[p * kVec + e]) * s);
    reinterpret_cast<P*>(w)[c * (kChunk / kVec) + p] = out;
  }
}

template <typename T>
cudaError_t LaunchDequantize(const int8_t* q, const float* scale, void* w, int64_t out, int64_t in,
                             cudaStream_t stream) {
  const int64_t chunks = out * (in / kChunk);
  if (chunks == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((chunks + kThreads - 1) / kThreads);
  DequantizeKernel<T>
      <<<blocks, kThreads, 0, stream>>>(q, scale, static_cast<T*>(w), in / kChunk, chunks);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchInt8Dequantize(FloatKind kind, const int8_t* q, const float* scale, void* w,
                                 int64_t out, int64_t in, cudaStream_t stream) {
  if (in % kChunk != 0) return cudaErrorInvalidValue;
  switch (kind) {
    case FloatKind::kBFloat16:
      return LaunchDequantize<__nv_bfloat16>(q, scale, w, out, in, stream);
    case FloatKind::kFloat16:
      return LaunchDequantize<__half>(q, scale, w, out, in, stream);
    case FloatKind::kFloat32:
      return LaunchDequantize<float>(q, scale, w, out, in, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchInt8Gemv(FloatKind kind, const void* x, const int8_t* q, const float* scale,
                           const void* bias, bool gelu, void* y, int64_t rows, int64_t out,
                           int64_t in, cudaStream_t stream) {
  if (rows < 1 || rows > kInt8GemvMaxRows || in % kChunk != 0) return cudaErrorInvalidValue;
  if (out == 0) return cudaSuccess;
  switch (kind) {
    case FloatKind::kBFloat16:
      return LaunchTyped<__nv_bfloat16>(x, q, scale, bias, gelu, y, rows, out, in, stream);
    case FloatKind::kFloat16:
      return LaunchTyped<__half>(x, q, scale, bias, gelu, y, rows, out, in, stream);
    case FloatKind::kFloat32:
      return LaunchTyped<float>(x, q, scale, bias, gelu, y, rows, out, in, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mt::kernels
