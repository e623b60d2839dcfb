// Where a fused kernel's dropout draws its random numbers: the Philox seed and offset of
// LibTorch's CUDA generator (its philox_cuda_state), for the CUDA side (no LibTorch: nvcc
// compiles the launch headers that use it). Outside a CUDA graph capture they are values; inside
// one they are device pointers that each replay fills, plus the capture's own offset, so that a
// replay draws what an eager call from the same generator state draws.
//
// The draw of element e (its index in the row-major tensor) is a function of (seed, offset, e)
// alone: Philox-4x32-10 at counter (offset / 4, e / 4) under key seed gives four uniforms of
// (0, 1] (curand's subsequence e / 4 at `offset`), e takes component e % 4, and the element is
// kept where its uniform is above p. A forward and its backward
// therefore agree on every mask whatever their kernels' vector widths, and a mask is never
// stored: the backward draws it again. Each call takes kDropoutPhiloxIncrement of the
// generator's offset.
#ifndef MT_WORKER_KERNELS_DROPOUT_RNG_H_
#define MT_WORKER_KERNELS_DROPOUT_RNG_H_

#include <cstdint>

namespace mt::kernels {

// The offset a call advances the generator by (one float4 of each subsequence).
constexpr uint64_t kDropoutPhiloxIncrement = 4;

// Where a pointer is non-null (inside a CUDA graph capture), the kernel reads the value there:
// the seed is *seed_ptr, the offset *offset_ptr + offset.
struct PhiloxArgs {
  uint64_t seed = 0;
  uint64_t offset = 0;
  const int64_t* seed_ptr = nullptr;
  const int64_t* offset_ptr = nullptr;
};

// Dropout with probability p (0: none; below 1) of a fused kernel's input, the kept values
// scaled by 1 / (1 - p).
struct DropoutArgs {
  float p = 0.0f;
  PhiloxArgs rng;
};

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_DROPOUT_RNG_H_
