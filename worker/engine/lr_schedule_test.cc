#include "worker/engine/lr_schedule.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::engine {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

// Megatron's OptimizerParamScheduler.get_lr, transliterated statement by statement from
// megatron/core/optimizer_param_scheduler.py (the oracle; deliberately not shared with the
// implementation).
double MegatronGetLr(double init_lr, double max_lr, double min_lr, double lr_warmup_steps,
                     double lr_decay_steps, const std::string& lr_decay_style, double num_steps) {
  if (lr_warmup_steps > 0 && num_steps <= lr_warmup_steps) {
    return init_lr + ((max_lr - init_lr) * num_steps / lr_warmup_steps);
  }
  if (lr_decay_style == "constant") return max_lr;
  if (num_steps > lr_decay_steps) return min_lr;
  if (lr_decay_style == "inverse-square-root") {
    const double warmup_steps = std::max(lr_warmup_steps, 1.0);
    const double steps = std::max(num_steps, 1.0);
    const double lr = max_lr * std::pow(warmup_steps, 0.5) / std::pow(steps, 0.5);
    return std::max(min_lr, lr);
  }
  const double num_steps_ = num_steps - lr_warmup_steps;
  const double decay_steps_ = lr_decay_steps - lr_warmup_steps;
  const double decay_ratio = num_steps_ / decay_steps_;
  const double delta_lr = max_lr - min_lr;
  double coeff = 0;
  if (lr_decay_style == "linear") {
    coeff = 1.0 - decay_ratio;
  } else if (lr_decay_style == "cosine") {
    coeff = 0.5 * (std::cos(M_PI * decay_ratio) + 1.0);
  }
  return min_lr + coeff * delta_lr;
}

struct Row {
  int64_t step;
  double want;  // hand-computed value
};

struct StyleTable {
  LrDecayStyle style;
  const char* megatron_name;
  std::vector<Row> rows;
};

// max_lr 1e-3, min_lr 1e-4, warmup 10, decay 110 (so 100 decay steps after warmup).
TEST(LrScheduleTest, TablesForEveryStyle) {
  const std::vector<StyleTable> tables = {
      {LrDecayStyle::kConstant,
       "constant",
       {{0, 0.0}, {1, 1e-4}, {5, 5e-4}, {10, 1e-3}, {11, 1e-3}, {110, 1e-3}, {1000, 1e-3}}},
      {LrDecayStyle::kLinear,
       "linear",
       {{0, 0.0},
        {5, 5e-4},
        {10, 1e-3},
        {35, 1e-4 + 0.75 * 9e-4},
        {60, 1e-4 + 0.5 * 9e-4},
        {110, 1e-4},
        {111, 1e-4},
        {5000, 1e-4}}},
      {LrDecayStyle::kCosine,
       "cosine",
       {{0, 0.0},
        {5, 5e-4},
        {10, 1e-3},
        {35, 1e-4 + 0.5 * (std::sqrt(0.5) + 1.0) * 9e-4},
        {60, 1e-4 + 0.5 * 9e-4},
        {85, 1e-4 + 0.5 * (1.0 - std::sqrt(0.5)) * 9e-4},
        {110, 1e-4},
        {111, 1e-4}}},
      {LrDecayStyle::kInverseSquareRoot,
       "inverse-square-root",
       {{0, 0.0},
        {10, 1e-3},
        {40, 1e-3 * std::sqrt(10.0) / std::sqrt(40.0)},  // 5e-4
        {90, 1e-3 * std::sqrt(10.0) / std::sqrt(90.0)},
        {110, 1e-3 * std::sqrt(10.0) / std::sqrt(110.0)},
        {111, 1e-4},  // past the decay steps: min_lr
        {100000, 1e-4}}},
  };
  for (const StyleTable& t : tables) {
    LrScheduleConfig c;
    c.max_lr = 1e-3;
    c.min_lr = 1e-4;
    c.warmup_steps = 10;
    c.decay_steps = 110;
    c.style = t.style;
    MT_ASSERT_OK_AND_ASSIGN(LrSchedule s, LrSchedule::Create(c));
    for (const Row& r : t.rows) {
      const double got = s.LearningRate(r.step);
      EXPECT_NEAR(got, r.want, 1e-15) << t.megatron_name << " step " << r.step;
      EXPECT_DOUBLE_EQ(
          got, MegatronGetLr(0, 1e-3, 1e-4, 10, 110, t.megatron_name, static_cast<double>(r.step)))
          << t.megatron_name << " step " << r.step;
    }
    // Every step against the oracle.
    for (int64_t step = 0; step <= 130; ++step) {
      EXPECT_DOUBLE_EQ(s.LearningRate(step), MegatronGetLr(0, 1e-3, 1e-4, 10, 110, t.megatron_name,
                                                           static_cast<double>(step)))
          << t.megatron_name << " step " << step;
    }
  }
}

TEST(LrScheduleTest, NoWarmupStartsAtMaxLr) {
  for (LrDecayStyle style : {LrDecayStyle::kConstant, LrDecayStyle::kLinear, LrDecayStyle::kCosine,
                             LrDecayStyle::kInverseSquareRoot}) {
    LrScheduleConfig c;
    c.max_lr = 6e-4;
    c.min_lr = 6e-5;
    c.decay_steps = 100;
    c.style = style;
    MT_ASSERT_OK_AND_ASSIGN(LrSchedule s, LrSchedule::Create(c));
    EXPECT_DOUBLE_EQ(s.LearningRate(0), 6e-4) << LrDecayStyleName(style);
    // inverse-square-root without warmup: max_lr / sqrt(step) from step 1.
    if (style == LrDecayStyle::kInverseSquareRoot) {
      EXPECT_DOUBLE_EQ(s.LearningRate(4), 3e-4);
      EXPECT_DOUBLE_EQ(s.LearningRate(400), 6e-5);  // past the decay steps: min_lr
    }
  }
}

TEST(LrScheduleTest, FromSpecCountsSamplesLikeMegatron) {
  mt::v1::TrainingSpec t;
  t.set_lr(1e-3);
  t.set_min_lr(1e-5);
  t.set_train_iters(1000);
  t.set_lr_warmup_iters(100);
  t.set_lr_decay_style(mt::v1::LR_DECAY_STYLE_COSINE);
  MT_ASSERT_OK_AND_ASSIGN(LrSchedule s, LrSchedule::FromSpec(t, /*global_batch_size=*/8));
  EXPECT_EQ(s.config().decay_steps, 8000);  // lr_decay_iters defaults to train_iters
  EXPECT_DOUBLE_EQ(s.config().warmup_steps, 800);
  EXPECT_EQ(s.config().style, LrDecayStyle::kCosine);
  // Iteration i runs at the rate after i * 8 samples: the first step with warmup runs at 0.
  EXPECT_DOUBLE_EQ(s.LearningRateAtIteration(0, 8), 0.0);
  EXPECT_DOUBLE_EQ(s.LearningRateAtIteration(50, 8), 5e-4);
  EXPECT_DOUBLE_EQ(s.LearningRateAtIteration(100, 8), 1e-3);
  EXPECT_DOUBLE_EQ(s.LearningRateAtIteration(1000, 8), 1e-5);

  t.set_lr_decay_iters(500);
  t.set_lr_warmup_fraction(0.01);  // 1% of 500 iterations = 5 iterations = 40 samples
  MT_ASSERT_OK_AND_ASSIGN(LrSchedule f, LrSchedule::FromSpec(t, 8));
  EXPECT_EQ(f.config().decay_steps, 4000);
  EXPECT_DOUBLE_EQ(f.config().warmup_steps, 40);

  // Fractional warmup in samples (3.3% of 100 samples = 3.3): exactly Megatron's arithmetic.
  mt::v1::TrainingSpec samples;
  samples.set_lr(2e-4);
  samples.set_train_samples(100);
  samples.set_lr_warmup_fraction(0.033);
  MT_ASSERT_OK_AND_ASSIGN(LrSchedule g, LrSchedule::FromSpec(samples, 4));
  EXPECT_EQ(g.config().decay_steps, 100);
  EXPECT_DOUBLE_EQ(g.config().warmup_steps, 0.033 * 100);
  EXPECT_EQ(g.config().style, LrDecayStyle::kLinear);  // unspecified = linear
  for (int64_t n : {0, 3, 4, 8, 50, 100, 101}) {
    EXPECT_DOUBLE_EQ(g.LearningRate(n),
                     MegatronGetLr(0, 2e-4, 0, 0.033 * 100, 100, "linear", static_cast<double>(n)))
        << n;
  }
  samples.clear_lr_warmup_fraction();
  samples.set_lr_warmup_samples(10);
  samples.set_lr_decay_samples(60);
  MT_ASSERT_OK_AND_ASSIGN(LrSchedule h, LrSchedule::FromSpec(samples, 4));
  EXPECT_EQ(h.config().decay_steps, 60);
  EXPECT_DOUBLE_EQ(h.config().warmup_steps, 10);
}

TEST(LrScheduleTest, RejectsWhatMegatronAsserts) {
  LrScheduleConfig c;
  c.max_lr = 1e-3;
  c.min_lr = 2e-3;
  EXPECT_THAT(LrSchedule::Create(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min_lr")));
  c.min_lr = 0;
  c.decay_steps = 0;
  EXPECT_THAT(LrSchedule::Create(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("decay steps")));
  c.decay_steps = 10;
  c.warmup_steps = 10;
  EXPECT_THAT(LrSchedule::Create(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("warmup")));
  mt::v1::TrainingSpec t;
  t.set_lr(1e-3);
  EXPECT_THAT(LrSchedule::FromSpec(t, 8),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("train_iters")));
  t.set_train_iters(10);
  t.set_lr_warmup_iters(20);
  EXPECT_THAT(LrSchedule::FromSpec(t, 8),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("warmup")));
  EXPECT_THAT(LrSchedule::FromSpec(t, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("global batch")));
}

}  // namespace
}  // namespace mt::engine
