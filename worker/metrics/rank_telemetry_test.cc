#include "worker/metrics/rank_telemetry.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::worker::metrics {
namespace {

using ::testing::ElementsAre;

engine::StepMetrics Step(int64_t it, double seconds) {
  engine::StepMetrics m;
  m.iteration = it;
  m.loss = 10.0 - it;
  m.learning_rate = 1e-3 * it;
  m.grad_norm = 0.5;
  m.loss_scale = 2;
  m.skipped_total = it / 2;
  m.tokens = 64;
  m.consumed_samples = 4 * it;
  m.seconds = seconds;
  m.data_seconds = 0.01;
  m.tokens_per_second = 64 / seconds;
  return m;
}

TEST(TelemetryAccumulatorTest, TheLatestIntervalRateStandsUntilTheNextLogStep) {
  const absl::Time t0 = absl::FromUnixSeconds(100);
  TelemetryAccumulator acc(absl::Seconds(1), t0);
  acc.AddStep(Step(1, 0.25));  // no interval yet: the step's own rate
  EXPECT_DOUBLE_EQ(acc.Take({}, t0 + absl::Seconds(1)).tokens_per_second(), 256.0);
  engine::StepMetrics log_step = Step(2, 0.5);
  log_step.interval_tokens_per_second = 200.0;
  log_step.interval_mfu = 0.25;
  acc.AddStep(log_step);
  mt::v1::RankTelemetry t = acc.Take({}, t0 + absl::Seconds(2));
  EXPECT_DOUBLE_EQ(t.tokens_per_second(), 200.0);
  EXPECT_DOUBLE_EQ(t.mfu(), 0.25);
  acc.AddStep(Step(3, 0.01));  // a queued step's 6400 tokens/s does not replace it
  t = acc.Take({}, t0 + absl::Seconds(3));
  EXPECT_DOUBLE_EQ(t.tokens_per_second(), 200.0);
  EXPECT_DOUBLE_EQ(t.mfu(), 0.25);
}

TEST(TelemetryAccumulatorTest, CollectsStepsAndIsDueAfterThePeriod) {
  const absl::Time t0 = absl::FromUnixSeconds(100);
  TelemetryAccumulator acc(absl::Seconds(1), t0);
  EXPECT_FALSE(acc.Due(t0 + absl::Seconds(5)));  // nothing to send
  acc.AddCommunication("all_reduce", "dp", 0.125, 3);
  acc.AddStep(Step(1, 0.25));
  acc.AddCommunication("send", "pp", 0.0625, 4);
  acc.AddCommunication("all_reduce", "dp", 0.25, 3);
  acc.AddStep(Step(2, 0.5));
  EXPECT_FALSE(acc.Due(t0 + absl::Milliseconds(999)));
  EXPECT_TRUE(acc.Due(t0 + absl::Seconds(1)));
  engine::MemoryStats mem;
  mem.allocated_bytes = 7;
  mem.reserved_bytes = 9;
  mem.peak_allocated_bytes = 8;
  mt::v1::RankTelemetry t = acc.Take(mem, t0 + absl::Seconds(1));
  EXPECT_EQ(t.step(), 2);
  EXPECT_DOUBLE_EQ(t.loss(), 8.0);
  EXPECT_DOUBLE_EQ(t.learning_rate(), 2e-3);
  EXPECT_EQ(t.skipped_steps(), 1);
  EXPECT_EQ(t.consumed_samples(), 8);
  EXPECT_DOUBLE_EQ(t.tokens_per_second(), 128.0);
  EXPECT_THAT(t.step_seconds(), ElementsAre(0.25, 0.5));
  EXPECT_EQ(t.tokens(), 128);
  EXPECT_DOUBLE_EQ(t.data_wait_seconds(), 0.02);
  EXPECT_EQ(t.memory_allocated_bytes(), 7);
  EXPECT_EQ(t.memory_reserved_bytes(), 9);
  EXPECT_EQ(t.memory_peak_bytes(), 8);
  ASSERT_EQ(t.communication_size(), 2);
  EXPECT_EQ(t.communication(0).collective(), "all_reduce");
  EXPECT_EQ(t.communication(0).group(), "dp");
  EXPECT_DOUBLE_EQ(t.communication(0).seconds(), 0.375);  // both steps' sums
  EXPECT_EQ(t.communication(0).calls(), 6);
  EXPECT_EQ(t.communication(1).collective(), "send");
  EXPECT_EQ(t.communication(1).group(), "pp");
  EXPECT_DOUBLE_EQ(t.communication(1).seconds(), 0.0625);
  EXPECT_EQ(t.communication(1).calls(), 4);
  // The next telemetry holds only what came after.
  EXPECT_FALSE(acc.Due(t0 + absl::Seconds(3)));
  acc.AddCommunication("all_gather", "tp", 0.5, 2);
  acc.AddStep(Step(3, 0.125));
  EXPECT_FALSE(acc.Due(t0 + absl::Milliseconds(1500)));
  EXPECT_TRUE(acc.Due(t0 + absl::Seconds(2)));
  t = acc.Take(mem, t0 + absl::Seconds(2));
  EXPECT_EQ(t.step(), 3);
  EXPECT_THAT(t.step_seconds(), ElementsAre(0.125));
  EXPECT_EQ(t.tokens(), 64);
  ASSERT_EQ(t.communication_size(), 1);  // only what happened since
  EXPECT_EQ(t.communication(0).collective(), "all_gather");
  EXPECT_EQ(t.communication(0).group(), "tp");
  EXPECT_DOUBLE_EQ(t.communication(0).seconds(), 0.5);
  EXPECT_EQ(t.communication(0).calls(), 2);
}

}  // namespace
}  // namespace mt::worker::metrics
