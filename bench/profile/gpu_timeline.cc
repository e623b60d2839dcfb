#include "bench/profile/gpu_timeline.h"

#include <algorithm>
#include <numeric>

namespace mt::bench {

GpuTimeline MeasureTimeline(const std::vector<GpuInterval>& intervals) {
  GpuTimeline t;
  if (intervals.empty()) return t;
  std::vector<size_t> order(intervals.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return intervals[a].start_ns < intervals[b].start_ns;
  });
  // One pass in start order: `end` is the latest end so far, `last` the kernel that has it; a
  // start past `end` closes a busy stretch and opens a gap.
  size_t last = order[0];
  int64_t begin = intervals[last].start_ns, end = intervals[last].end_ns;
  for (size_t i : order) t.kernel_ns += intervals[i].end_ns - intervals[i].start_ns;
  for (size_t k = 1; k < order.size(); ++k) {
    const GpuInterval& e = intervals[order[k]];
    const int64_t gap = e.start_ns - end;
    if (gap > 0) {
      t.busy_ns += end - begin;
      begin = e.start_ns;
      if (gap < kStallNs) {
        t.spacing_ns += gap;
        ++t.spacing_gaps;
      } else {
        t.stall_ns += gap;
        t.stalls.push_back({gap, last});
      }
    }
    if (e.end_ns > end) {
      end = e.end_ns;
      last = order[k];
    }
  }
  t.busy_ns += end - begin;
  std::stable_sort(t.stalls.begin(), t.stalls.end(),
                   [](const GpuStall& a, const GpuStall& b) { return a.ns > b.ns; });
  return t;
}

}  // namespace mt::bench
