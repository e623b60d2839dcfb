// MeasureTimeline on hand-made time lines: kernels back to back, with launch spacing, with a
// stall, overlapping (a side stream) and nested, in any order; the sums against a count over
// every nanosecond of a random time line.
#include "bench/profile/gpu_timeline.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace mt::bench {
namespace {

TEST(GpuTimelineTest, EmptyAndOneKernel) {
  const GpuTimeline none = MeasureTimeline({});
  EXPECT_EQ(none.busy_ns, 0);
  EXPECT_EQ(none.kernel_ns, 0);
  const GpuTimeline one = MeasureTimeline({{100, 350}});
  EXPECT_EQ(one.busy_ns, 250);
  EXPECT_EQ(one.kernel_ns, 250);
  EXPECT_EQ(one.spacing_gaps, 0);
  EXPECT_TRUE(one.stalls.empty());
}

TEST(GpuTimelineTest, SpacingAndStallsBetweenKernels) {
  // 0-1000, a 2 us gap, 3000-4000, a 50 us stall, 54000-55000, back to back 55000-56000, a 9.999
  // us gap (spacing), 65999-66000.
  const GpuTimeline t =
      MeasureTimeline({{0, 1000}, {3000, 4000}, {54000, 55000}, {55000, 56000}, {65999, 66000}});
  EXPECT_EQ(t.kernel_ns, 4001);
  EXPECT_EQ(t.busy_ns, 4001);
  EXPECT_EQ(t.spacing_ns, 2000 + 9999);
  EXPECT_EQ(t.spacing_gaps, 2);
  EXPECT_EQ(t.stall_ns, 50000);
  ASSERT_EQ(t.stalls.size(), 1u);
  EXPECT_EQ(t.stalls[0].ns, 50000);
  EXPECT_EQ(t.stalls[0].after, 1u);  // after the kernel that ended at 4000
}

TEST(GpuTimelineTest, OverlappingKernelsCountOnceInBusyTime) {
  // A side stream's kernel 500-1500 over 0-1000, one nested inside 1600-3000 (2000-2500), given
  // out of order.
  const GpuTimeline t = MeasureTimeline({{2000, 2500}, {0, 1000}, {1600, 3000}, {500, 1500}});
  EXPECT_EQ(t.kernel_ns, 1000 + 1000 + 1400 + 500);
  EXPECT_EQ(t.busy_ns, 1500 + 1400);
  EXPECT_EQ(t.spacing_ns, 100);  // 1500 to 1600; the nested kernel opens no gap
  EXPECT_EQ(t.spacing_gaps, 1);
  EXPECT_TRUE(t.stalls.empty());
}

TEST(GpuTimelineTest, AStallFollowsTheKernelThatEndedLast) {
  // The long kernel 0-9000 ends after the short one 100-200 that starts later: the stall before
  // 30000 follows the long one (index 0), not the last to start.
  const GpuTimeline t = MeasureTimeline({{0, 9000}, {100, 200}, {30000, 31000}, {90000, 90001}});
  ASSERT_EQ(t.stalls.size(), 2u);
  EXPECT_EQ(t.stalls[0].ns, 59000);  // longest first
  EXPECT_EQ(t.stalls[0].after, 2u);
  EXPECT_EQ(t.stalls[1].ns, 21000);
  EXPECT_EQ(t.stalls[1].after, 0u);
  EXPECT_EQ(t.stall_ns, 80000);
}

// Against a count over every nanosecond: busy = the instants some kernel covers, gaps = the
// uncovered instants between the first start and the last end.
TEST(GpuTimelineTest, MatchesACountOverEveryNanosecond) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<GpuInterval> v;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      const int64_t start = rng() % 40000, length = rng() % 8000;
      v.push_back({start, start + length});
    }
    int64_t lo = v[0].start_ns, hi = v[0].end_ns, kernels = 0;
    for (const GpuInterval& e : v) {
      lo = std::min(lo, e.start_ns);
      hi = std::max(hi, e.end_ns);
      kernels += e.end_ns - e.start_ns;
    }
    int64_t busy = 0;
    for (int64_t ns = lo; ns < hi; ++ns) {
      for (const GpuInterval& e : v) {
        if (e.start_ns <= ns && ns < e.end_ns) {
          ++busy;
          break;
        }
      }
    }
    const GpuTimeline t = MeasureTimeline(v);
    EXPECT_EQ(t.kernel_ns, kernels) << round;
    EXPECT_EQ(t.busy_ns, busy) << round;
    EXPECT_EQ(t.busy_ns + t.spacing_ns + t.stall_ns, hi - lo) << round;
  }
}

}  // namespace
}  // namespace mt::bench
