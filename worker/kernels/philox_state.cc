#include "worker/kernels/philox_state.h"

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>

#include <mutex>
#include <utility>
#endif

namespace mt::kernels {

#if MT_KERNELS_WITH_CUDA
namespace {

// LibTorch's PhiloxCudaState holds the seed as a value (older releases) or as a union of a value
// and a device pointer (newer ones, where a captured graph's seed lives on the device too).
template <typename S>
auto SeedOf(const S& s, int) -> decltype(s.seed_.ptr, std::pair<uint64_t, const int64_t*>()) {
  return s.captured_ ? std::pair<uint64_t, const int64_t*>{0, s.seed_.ptr}
                     : std::pair<uint64_t, const int64_t*>{s.seed_.val, nullptr};
}
template <typename S>
std::pair<uint64_t, const int64_t*> SeedOf(const S& s, long) {
  return {static_cast<uint64_t>(s.seed_), nullptr};
}

}  // namespace

PhiloxArgs TakePhiloxArgs(c10::DeviceIndex device, uint64_t increment) {
  at::Generator gen = at::cuda::detail::getDefaultCUDAGenerator(device);
  at::PhiloxCudaState state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state = gen.get<at::CUDAGeneratorImpl>()->philox_cuda_state(increment);
  }
  PhiloxArgs args;
  const auto [seed, seed_ptr] = SeedOf(state, 0);
  args.seed = seed;
  if (state.captured_) {
    // A captured seed held by value (older LibTorch) is the same for every replay.
    args.seed_ptr = seed_ptr;
    args.offset_ptr = state.offset_.ptr;
    args.offset = state.offset_intragraph_;
  } else {
    args.offset = state.offset_.val;
  }
  return args;
}
#endif

}  // namespace mt::kernels
