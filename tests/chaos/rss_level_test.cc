#include "tests/chaos/rss_level.h"

#include <vector>

#include "gtest/gtest.h"

namespace mt::chaos {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

// One sample a second: bytes(i) for i in [0, n).
template <typename F>
std::vector<MemorySample> Series(int n, F bytes) {
  std::vector<MemorySample> out;
  for (int i = 0; i < n; ++i) out.push_back({kT0 + absl::Seconds(i), bytes(i)});
  return out;
}

TEST(RssLevel, TheMedianOfTheSpanHalfOpen) {
  const auto s = Series(10, [](int i) { return int64_t{100} + i; });
  EXPECT_EQ(LevelIn(s, kT0, kT0 + absl::Seconds(5)), 102.0);                      // 100..104
  EXPECT_EQ(LevelIn(s, kT0 + absl::Seconds(4), kT0 + absl::Seconds(10)), 106.5);  // 104..109
  EXPECT_EQ(LevelIn(s, kT0, kT0 + absl::Seconds(4)), std::nullopt);               // 4 samples
  EXPECT_EQ(LevelIn({}, kT0, kT0 + absl::Hours(1)), std::nullopt);
}

TEST(RssLevel, ASwingWithoutTrendIsNoGrowth) {
  // 30 MiB with a 1.5 MiB swing (5 s low, 5 s high), sampled for 3 minutes; the first sample at
  // the bottom of the swing and the last at the top: +5% between those two alone.
  const int64_t mib = 1 << 20;
  const auto s = Series(180, [&](int i) { return 30 * mib + (i % 10 < 5 ? 0 : 3 * mib / 2); });
  const double single = static_cast<double>(s.back().bytes) / s.front().bytes - 1;
  ASSERT_GE(single, 0.05);
  const auto g = LevelGrowth(s, absl::Seconds(30));
  ASSERT_TRUE(g.has_value());
  EXPECT_NEAR(*g, 0.0, 1e-12);
}

TEST(RssLevel, SteadyGrowthIsSeen) {
  // +0.1% a second over 3 minutes: the levels 150 s apart differ by ~15%.
  const auto s = Series(181, [](int i) { return int64_t{1000000} + 1000 * i; });
  const auto g = LevelGrowth(s, absl::Seconds(30));
  ASSERT_TRUE(g.has_value());
  EXPECT_NEAR(*g, 151000.0 / 1014500.0, 1e-9);  // the median at 165.5 s against 14.5 s
}

TEST(RssLevel, AStepUpHalfwayIsSeen) {
  const auto s = Series(120, [](int i) { return int64_t{i < 60 ? 100 : 110}; });
  EXPECT_NEAR(LevelGrowth(s, absl::Seconds(30)).value(), 0.10, 1e-12);
}

TEST(RssLevel, TooShortOrTooSparseIsNoJudgement) {
  EXPECT_EQ(LevelGrowth({}, absl::Seconds(30)), std::nullopt);
  EXPECT_EQ(LevelGrowth(Series(50, [](int) { return int64_t{1}; }), absl::Seconds(30)),
            std::nullopt);  // 49 s: the spans overlap
  std::vector<MemorySample> sparse = {{kT0, 1}, {kT0 + absl::Seconds(100), 2}};
  EXPECT_EQ(LevelGrowth(sparse, absl::Seconds(30)), std::nullopt);
}

}  // namespace
}  // namespace mt::chaos
