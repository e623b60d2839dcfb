// The device side of dropout_rng.h: the seed and offset of a call, and the keep-scales of a pack
// of elements.
#ifndef MT_WORKER_KERNELS_DROPOUT_RNG_CUH_
#define MT_WORKER_KERNELS_DROPOUT_RNG_CUH_

#include <curand_kernel.h>

#include <cstdint>

#include "worker/kernels/dropout_rng.h"

namespace mt::kernels {

struct PhiloxSeedOffset {
  uint64_t seed;
  uint64_t offset;
};

__device__ __forceinline__ PhiloxSeedOffset Unpack(const PhiloxArgs& a) {
  const uint64_t seed = a.seed_ptr != nullptr ? static_cast<uint64_t>(*a.seed_ptr) : a.seed;
  const uint64_t offset =
      a.offset_ptr != nullptr ? static_cast<uint64_t>(*a.offset_ptr) + a.offset : a.offset;
  return {seed, offset};
}

// The four uniforms of (0, 1] of elements [4 q, 4 q + 4): Philox-4x32-10 at counter
// (offset / 4, q) under key seed, as curand_init(seed, q, offset) and curand_uniform4 give them
// where offset is a multiple of 4 (LibTorch's always are), without curand's state in registers.
__device__ __forceinline__ float4 DrawQuad(const PhiloxSeedOffset& s, int64_t q) {
  const uint64_t block = s.offset / 4;
  const uint64_t sub = static_cast<uint64_t>(q);
  const uint4 counter = make_uint4(static_cast<unsigned>(block), static_cast<unsigned>(block >> 32),
                                   static_cast<unsigned>(sub), static_cast<unsigned>(sub >> 32));
  const uint2 key = make_uint2(static_cast<unsigned>(s.seed), static_cast<unsigned>(s.seed >> 32));
  return _curand_uniform4(curand_Philox4x32_10(counter, key));
}

__device__ __forceinline__ float Component(const float4& u, int64_t i) {
  switch (i) {
    case 0:
      return u.x;
    case 1:
      return u.y;
    case 2:
      return u.z;
    default:
      return u.w;
  }
}

// out[k] = scale where element first + k is kept, else 0. With kVec a multiple of 4, first is too
// (a pack of a row whose width is: the vector kernels); kVec 1 takes any element.
template <int kVec>
__device__ __forceinline__ void KeepScales(const PhiloxSeedOffset& s, int64_t first, float p,
                                           float scale, float (&out)[kVec]) {
  if constexpr (kVec % 4 == 0) {
#pragma unroll
    for (int q = 0; q < kVec / 4; ++q) {
      const float4 u = DrawQuad(s, first / 4 + q);
      out[4 * q] = u.x > p ? scale : 0.0f;
      out[4 * q + 1] = u.y > p ? scale : 0.0f;
      out[4 * q + 2] = u.z > p ? scale : 0.0f;
      out[4 * q + 3] = u.w > p ? scale : 0.0f;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int64_t e = first + k;
      out[k] = Component(DrawQuad(s, e / 4), e % 4) > p ? scale : 0.0f;
    }
  }
}

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_DROPOUT_RNG_CUH_
