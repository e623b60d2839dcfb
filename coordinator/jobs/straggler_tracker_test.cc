// StragglerTracker: the median, full windows, the threshold, persistence and recovery.
#include "coordinator/jobs/straggler_tracker.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

TEST(MedianTest, OddEvenEmpty) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3}), 3);
  EXPECT_EQ(Median({5, 1, 3}), 3);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(Median({1, 1, 1, 9}), 1);
}

std::vector<double> Repeat(double v, int n) { return std::vector<double>(n, v); }

TEST(StragglerTrackerTest, NoRatioUntilTwoFullWindows) {
  StragglerTracker t(3, 1.5, 4);
  t.Add(0, Repeat(1, 4));
  EXPECT_FALSE(t.Ratio(0).has_value());  // alone
  t.Add(1, Repeat(1, 3));
  EXPECT_FALSE(t.Ratio(0).has_value());
  EXPECT_FALSE(t.Ratio(1).has_value());
  t.Add(1, {1});
  ASSERT_TRUE(t.Ratio(0).has_value());
  EXPECT_EQ(*t.Ratio(0), 1);
  EXPECT_FALSE(t.Ratio(2).has_value());
  EXPECT_FALSE(t.Ratio(3).has_value());
  EXPECT_FALSE(t.Ratio(-1).has_value());
  EXPECT_TRUE(t.Update().empty());
}

TEST(StragglerTrackerTest, APersistentlySlowRankIsReportedOnceThenRecovers) {
  StragglerTracker t(4, 1.5, 5);
  for (int r = 0; r < 3; ++r) t.Add(r, Repeat(1.0, 5));
  t.Add(3, Repeat(2.0, 5));
  // Medians 1, 1, 1, 2: the others' median is 1 for every rank, rank 3's ratio 2.
  EXPECT_DOUBLE_EQ(*t.Ratio(3), 2.0);
  EXPECT_DOUBLE_EQ(*t.Ratio(0), 1.0);
  auto changes = t.Update();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 3);
  EXPECT_TRUE(changes[0].straggling);
  EXPECT_DOUBLE_EQ(changes[0].ratio, 2.0);
  EXPECT_TRUE(t.Update().empty());  // once
  // Back to normal over a whole window.
  t.Add(3, Repeat(1.1, 5));
  changes = t.Update();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank, 3);
  EXPECT_FALSE(changes[0].straggling);
  EXPECT_NEAR(changes[0].ratio, 1.1, 1e-12);
}

TEST(StragglerTrackerTest, AFewSlowStepsAreNotAStraggler) {
  StragglerTracker t(2, 1.5, 5);
  t.Add(0, Repeat(1.0, 5));
  t.Add(1, {1.0, 1.0, 1.0, 9.0, 9.0});  // median 1
  EXPECT_TRUE(t.Update().empty());
  t.Add(1, {9.0});  // 1, 1, 9, 9, 9: median 9; the other rank's median 1; ratio 9
  auto changes = t.Update();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_DOUBLE_EQ(changes[0].ratio, 9.0);
}

// The ratio is the rank's slowdown against the others, also with two ranks (a median that
// included the straggler read 2 x 5 / 6 = 1.67 for a rank 5x as slow, and never passed 2).
TEST(StragglerTrackerTest, TheRatioIsTheSlowdownAgainstTheOtherRanks) {
  StragglerTracker two(2, 1.5, 3);
  two.Add(0, Repeat(0.05, 3));
  two.Add(1, Repeat(0.25, 3));
  EXPECT_NEAR(*two.Ratio(1), 5.0, 1e-12);
  EXPECT_NEAR(*two.Ratio(0), 0.2, 1e-12);
  StragglerTracker eight(8, 1.5, 3);
  for (int r = 0; r < 7; ++r) eight.Add(r, Repeat(1.0 + 0.01 * r, 3));
  eight.Add(7, Repeat(3.09, 3));
  EXPECT_NEAR(*eight.Ratio(7), 3.0, 1e-12);  // the others' median: 1.03
  // Rank 3's others: 1.00, 1.01, 1.02, 1.04, 1.05, 1.06, 3.09; their median 1.04.
  EXPECT_NEAR(*eight.Ratio(3), 1.03 / 1.04, 1e-12);
}

TEST(StragglerTrackerTest, TheThresholdIsStrict) {
  StragglerTracker t(3, 1.5, 1);
  t.Add(0, {2.0});
  t.Add(1, {2.0});
  t.Add(2, {3.0});  // exactly 1.5
  EXPECT_TRUE(t.Update().empty());
  t.Add(2, {3.02});
  EXPECT_EQ(t.Update().size(), 1u);
}

TEST(StragglerTrackerTest, BadValuesAndRanksAreDropped) {
  StragglerTracker t(2, 1.5, 2);
  t.Add(0, {1.0, std::nan(""), -1.0, INFINITY, 1.0});
  t.Add(5, {1.0, 1.0});
  t.Add(-1, {1.0, 1.0});
  t.Add(1, {1.0, 1.0});
  EXPECT_DOUBLE_EQ(*t.Ratio(0), 1.0);
  EXPECT_DOUBLE_EQ(*t.Ratio(1), 1.0);
}

TEST(StragglerTrackerTest, ZeroComputeTimes) {
  StragglerTracker t(2, 1.5, 1);
  t.Add(0, {0.0});
  t.Add(1, {0.0});
  EXPECT_DOUBLE_EQ(*t.Ratio(0), 1.0);
  EXPECT_TRUE(t.Update().empty());
}

TEST(StragglerTrackerTest, WindowIsAtLeastOne) {
  StragglerTracker t(2, 1.5, 0);
  EXPECT_EQ(t.window(), 1);
  EXPECT_EQ(t.threshold(), 1.5);
}

}  // namespace
}  // namespace mt::coordinator
