// A fused kernel's share of LibTorch's CUDA generator (dropout_rng.h): the Philox seed and
// offset its dropout draws from, taken under the generator's lock, the generator advanced past
// them. Inside a CUDA graph capture LibTorch hands out device pointers that each replay fills, so
// that a replay draws as an eager call from the same generator state does.
#ifndef MT_WORKER_KERNELS_PHILOX_STATE_H_
#define MT_WORKER_KERNELS_PHILOX_STATE_H_

#include <c10/core/Device.h>

#include <cstdint>

#include "worker/kernels/dropout_rng.h"

namespace mt::kernels {

#if MT_KERNELS_WITH_CUDA
// The default CUDA generator of `device` (-1: the current one) advanced by `increment` (a
// multiple of 4), and where it stood before.
PhiloxArgs TakePhiloxArgs(c10::DeviceIndex device, uint64_t increment);
#endif

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_PHILOX_STATE_H_
