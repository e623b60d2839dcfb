// ComputeClock: forward and backward time per step from activity changes, less the blocking
// collectives; data, optimizer (the DP wait), evaluation and saves left out.
#include "worker/train/compute_clock.h"

#include "gtest/gtest.h"

namespace mt::train {
namespace {

using engine::Activity;
using std::chrono::milliseconds;

TEST(ComputeClockTest, CountsForwardAndBackwardOnly) {
  ComputeClock clock;
  const ComputeClock::TimePoint t0{};
  clock.OnActivity(Activity::kData, t0);
  clock.OnActivity(Activity::kForward, t0 + milliseconds(30));    // data: 30 ms, left out
  clock.OnActivity(Activity::kBackward, t0 + milliseconds(130));  // forward: 100 ms
  clock.OnActivity(Activity::kData, t0 + milliseconds(330));      // backward: 200 ms
  clock.OnActivity(Activity::kForward, t0 + milliseconds(340));
  clock.OnActivity(Activity::kBackward, t0 + milliseconds(440));   // forward: 100 ms
  clock.OnActivity(Activity::kOptimizer, t0 + milliseconds(640));  // backward: 200 ms
  // The optimizer (where a fast rank waits for a straggler's gradients) is left out.
  EXPECT_NEAR(clock.Take(0, t0 + milliseconds(2000)), 0.6, 1e-9);
  clock.OnActivity(Activity::kCollective, t0 + milliseconds(2100));  // the stop vote
  clock.OnActivity(Activity::kEval, t0 + milliseconds(2200));
  clock.OnActivity(Activity::kSave, t0 + milliseconds(2300));
  EXPECT_EQ(clock.Take(0, t0 + milliseconds(2400)), 0);
}

TEST(ComputeClockTest, BlockingCollectivesAreSubtractedAndTakeSplitsAPass) {
  ComputeClock clock;
  const ComputeClock::TimePoint t0{};
  clock.OnActivity(Activity::kForward, t0);
  // A pipeline schedule is one long kForward: a take in the middle splits it.
  EXPECT_NEAR(clock.Take(0.25, t0 + milliseconds(1000)), 0.75, 1e-9);
  clock.OnActivity(Activity::kOptimizer, t0 + milliseconds(1500));
  EXPECT_NEAR(clock.Take(0, t0 + milliseconds(1600)), 0.5, 1e-9);
  clock.OnActivity(Activity::kForward, t0 + milliseconds(2000));
  clock.OnActivity(Activity::kOptimizer, t0 + milliseconds(2100));
  EXPECT_EQ(clock.Take(5.0, t0 + milliseconds(2200)), 0);  // never negative
  EXPECT_NEAR(clock.Take(-1.0, t0 + milliseconds(2300)), 0, 1e-12);
}

TEST(ComputeClockTest, OnlySynchronousGroupsBlockThePasses) {
  EXPECT_TRUE(ComputeClock::BlocksThePasses("tp"));
  EXPECT_TRUE(ComputeClock::BlocksThePasses("pp"));
  EXPECT_TRUE(ComputeClock::BlocksThePasses("embedding"));
  // DP buckets are asynchronous (their spans overlap backward); the world's stop vote and the
  // model-parallel global norm run outside the passes.
  EXPECT_FALSE(ComputeClock::BlocksThePasses("dp"));
  EXPECT_FALSE(ComputeClock::BlocksThePasses("world"));
  EXPECT_FALSE(ComputeClock::BlocksThePasses("model_parallel"));
}

}  // namespace
}  // namespace mt::train
