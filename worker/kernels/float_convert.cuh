// Device-side helpers the kernels share (nvcc only; no LibTorch): conversion of fp32, bf16 and
// fp16 elements to and from fp32, the vector type of 16-byte loads, a warp's sum and the
// tanh-approximated GELU.
#ifndef MT_WORKER_KERNELS_FLOAT_CONVERT_CUH_
#define MT_WORKER_KERNELS_FLOAT_CONVERT_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace mt::kernels {

template <typename T>
__device__ __forceinline__ float F(T v);
template <>
__device__ __forceinline__ float F<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float F<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float F<__half>(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T To(float v);
template <>
__device__ __forceinline__ float To<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 To<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __forceinline__ __half To<__half>(float v) {
  return __float2half(v);
}

// kVec elements of T loaded or stored as one vector (16 bytes when sizeof(T) * kVec == 16).
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

// a + b elementwise, each sum rounded to T (what a residual add stores).
template <typename T, int kVec>
__device__ __forceinline__ Pack<T, kVec> AddPacks(const Pack<T, kVec>& a, const Pack<T, kVec>& b) {
  Pack<T, kVec> s;
#pragma unroll
  for (int k = 0; k < kVec; ++k) s.v[k] = To<T>(F(a.v[k]) + F(b.v[k]));
  return s;
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// gelu(v) with tanh's approximation (torch.nn.functional.gelu(approximate="tanh")), in fp32.
__device__ __forceinline__ float GeluTanh(float v) {
  constexpr float kAlpha = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * v * (1.0f + tanhf(kAlpha * (v + 0.044715f * v * v * v)));
}

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_FLOAT_CONVERT_CUH_
