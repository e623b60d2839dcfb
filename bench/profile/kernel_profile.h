// The top GPU kernels of a piece of work, for the benchmarks' profiling modes (profile_step,
// decode_bench --profile): runs it under LibTorch's Kineto profiler and prints on stdout the
// wall time and GPU busy time per unit of work, where the GPU idles between kernels, and the
// kernels by total time (ms per unit, share of the busy time, calls per unit, name).
#ifndef MT_BENCH_PROFILE_KERNEL_PROFILE_H_
#define MT_BENCH_PROFILE_KERNEL_PROFILE_H_

#include <functional>
#include <string>

namespace mt::bench {

struct KernelProfileOptions {
  int units = 1;  // what `body` does, in units (steps, tokens) to divide by
  std::string unit = "step";
  int top = 25;       // kernels printed
  std::string trace;  // also save a Chrome trace here when not empty
};

// False (after saying why on stderr) where this LibTorch has no Kineto (< 2.0): nothing ran.
bool ProfileKernels(const std::function<void()>& body, const KernelProfileOptions& options);

}  // namespace mt::bench

#endif  // MT_BENCH_PROFILE_KERNEL_PROFILE_H_
