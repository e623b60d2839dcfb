#include "tests/chaos/fault_plan.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace mt::chaos {
namespace {

std::vector<FaultKind> Kinds(uint64_t seed, int n) {
  FaultPlan plan(seed);
  std::vector<FaultKind> out;
  for (int i = 0; i < n; ++i) out.push_back(plan.NextKind());
  return out;
}

TEST(FaultPlanTest, TheSameSeedGivesTheSamePlan) {
  EXPECT_EQ(Kinds(42, 30), Kinds(42, 30));
  FaultPlan a(7), b(7);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.Uniform(0, 1000), b.Uniform(0, 1000));
}

TEST(FaultPlanTest, DifferentSeedsGiveDifferentPlans) { EXPECT_NE(Kinds(1, 30), Kinds(2, 30)); }

TEST(FaultPlanTest, EveryRoundHoldsEveryKindOnce) {
  const std::vector<FaultKind> kinds = Kinds(20261202, 5 * kFaultKinds);
  for (int round = 0; round < 5; ++round) {
    std::set<FaultKind> seen(kinds.begin() + round * kFaultKinds,
                             kinds.begin() + (round + 1) * kFaultKinds);
    EXPECT_EQ(seen.size(), static_cast<size_t>(kFaultKinds)) << "round " << round;
  }
}

TEST(FaultPlanTest, UniformStaysInItsBoundsAndReachesThem) {
  FaultPlan plan(3);
  std::set<int64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const int64_t v = plan.Uniform(-2, 2);
    ASSERT_GE(v, -2);
    ASSERT_LE(v, 2);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(plan.Uniform(9, 9), 9);
  const absl::Duration d = plan.UniformDuration(absl::Seconds(1), absl::Seconds(2));
  EXPECT_GE(d, absl::Seconds(1));
  EXPECT_LE(d, absl::Seconds(2));
}

TEST(FaultPlanTest, NamesAreDistinct) {
  std::set<std::string> names;
  for (int k = 0; k < kFaultKinds; ++k) names.insert(FaultName(static_cast<FaultKind>(k)));
  EXPECT_EQ(names.size(), static_cast<size_t>(kFaultKinds));
  EXPECT_STREQ(FaultName(FaultKind::kFillDisk), "fill_disk");
}

}  // namespace
}  // namespace mt::chaos
