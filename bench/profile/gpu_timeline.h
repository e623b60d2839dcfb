// The GPU's time line of a profiled piece of work, from its kernels' [start, end) intervals:
// how long the GPU was busy (the union of the intervals: kernels that overlap, on side streams or
// through dependent launches, count once), how long the kernels ran (their sum), and where it
// idled between them: launch spacing (gaps under kStallNs, what a queue that is ahead of the GPU
// still costs between kernels) and stalls (gaps of kStallNs or more: the host was behind), each
// stall with the kernel it followed (the one whose end was the latest so far). Pure; no LibTorch.
#ifndef MT_BENCH_PROFILE_GPU_TIMELINE_H_
#define MT_BENCH_PROFILE_GPU_TIMELINE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mt::bench {

inline constexpr int64_t kStallNs = 10'000;

struct GpuInterval {
  int64_t start_ns = 0;
  int64_t end_ns = 0;  // >= start_ns
};

struct GpuStall {
  int64_t ns = 0;
  size_t after = 0;  // index into the intervals as given: the kernel the GPU idled after
};

struct GpuTimeline {
  int64_t busy_ns = 0;    // the union of the intervals
  int64_t kernel_ns = 0;  // the sum of their lengths (>= busy_ns)
  int64_t spacing_ns = 0;
  int64_t spacing_gaps = 0;
  int64_t stall_ns = 0;
  std::vector<GpuStall> stalls;  // longest first
};

// The time line of `intervals` (any order).
GpuTimeline MeasureTimeline(const std::vector<GpuInterval>& intervals);

}  // namespace mt::bench

#endif  // MT_BENCH_PROFILE_GPU_TIMELINE_H_
