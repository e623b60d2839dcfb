#include "worker/engine/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::engine {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

// Megatron's DynamicGradScaler (megatron/core/optimizer/grad_scaler.py), transliterated: the
// oracle.
struct MegatronDynamicGradScaler {
  double scale, min_scale, growth_factor, backoff_factor;
  int64_t growth_interval, hysteresis;
  int64_t growth_tracker = 0;
  int64_t hysteresis_tracker;

  MegatronDynamicGradScaler(double initial, double min, double growth, double backoff,
                            int64_t interval, int64_t hyst)
      : scale(initial),
        min_scale(min),
        growth_factor(growth),
        backoff_factor(backoff),
        growth_interval(interval),
        hysteresis(hyst),
        hysteresis_tracker(hyst) {}

  void update(bool found_inf) {
    if (found_inf) {
      growth_tracker = 0;
      hysteresis_tracker -= 1;
      if (hysteresis_tracker <= 0) scale = std::max(scale * backoff_factor, min_scale);
    } else {
      growth_tracker += 1;
      if (growth_tracker == growth_interval) {
        growth_tracker = 0;
        hysteresis_tracker = hysteresis;
        scale = scale * growth_factor;
      }
    }
  }
};

LossScalerConfig Dynamic(double initial, int64_t window, int64_t hysteresis, double min = 1.0) {
  LossScalerConfig c;
  c.kind = LossScalerConfig::Kind::kDynamic;
  c.initial_scale = initial;
  c.growth_interval = window;
  c.hysteresis = hysteresis;
  c.min_scale = min;
  return c;
}

TEST(LossScalerTest, FromSpecUsesMegatronDefaults) {
  mt::v1::TrainingSpec t;
  t.set_precision(mt::v1::PRECISION_FP16);
  MT_ASSERT_OK_AND_ASSIGN(LossScaler s, LossScaler::FromSpec(t));
  EXPECT_EQ(s.config().kind, LossScalerConfig::Kind::kDynamic);
  EXPECT_EQ(s.scale(), 4294967296.0);  // 2^32
  EXPECT_EQ(s.config().min_scale, 1.0);
  EXPECT_EQ(s.config().growth_factor, 2.0);
  EXPECT_EQ(s.config().backoff_factor, 0.5);
  EXPECT_EQ(s.config().growth_interval, 1000);
  EXPECT_EQ(s.config().hysteresis, 2);

  t.set_loss_scale(128);
  MT_ASSERT_OK_AND_ASSIGN(LossScaler fixed, LossScaler::FromSpec(t));
  EXPECT_EQ(fixed.config().kind, LossScalerConfig::Kind::kStatic);
  EXPECT_EQ(fixed.scale(), 128);

  for (auto p : {mt::v1::PRECISION_FP32, mt::v1::PRECISION_BF16, mt::v1::PRECISION_UNSPECIFIED}) {
    t.set_precision(p);
    MT_ASSERT_OK_AND_ASSIGN(LossScaler none, LossScaler::FromSpec(t));
    EXPECT_EQ(none.config().kind, LossScalerConfig::Kind::kNone);
    EXPECT_EQ(none.scale(), 1.0);
    none.Update(true);
    EXPECT_EQ(none.scale(), 1.0);
  }
}

TEST(LossScalerTest, OverflowHalvesAfterHysteresis) {
  MT_ASSERT_OK_AND_ASSIGN(LossScaler s, LossScaler::Create(Dynamic(65536, 1000, 2)));
  s.Update(true);  // hysteresis 2 -> 1: scale kept
  EXPECT_EQ(s.scale(), 65536);
  EXPECT_EQ(s.hysteresis_tracker(), 1);
  s.Update(true);  // 1 -> 0: halved
  EXPECT_EQ(s.scale(), 32768);
  s.Update(false);  // a good step does not refill the hysteresis budget ...
  s.Update(true);   // ... so the next overflow halves at once
  EXPECT_EQ(s.scale(), 16384);
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(LossScalerTest, DoublesAfterWindowAndRefillsHysteresis) {
  MT_ASSERT_OK_AND_ASSIGN(LossScaler s, LossScaler::Create(Dynamic(1024, 3, 2)));
  s.Update(true);
  s.Update(true);
  EXPECT_EQ(s.scale(), 512);
  s.Update(false);
  s.Update(false);
  EXPECT_EQ(s.scale(), 512);
  s.Update(false);  // third good step in a row: doubled
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_EQ(s.hysteresis_tracker(), 2);
  s.Update(false);
  s.Update(true);  // an overflow resets the growth count
  s.Update(false);
  s.Update(false);
  EXPECT_EQ(s.scale(), 1024);
  s.Update(false);
  EXPECT_EQ(s.scale(), 2048);
}

TEST(LossScalerTest, NeverBelowMinScale) {
  MT_ASSERT_OK_AND_ASSIGN(LossScaler s, LossScaler::Create(Dynamic(8, 1000, 1, /*min=*/2)));
  for (int i = 0; i < 10; ++i) s.Update(true);
  EXPECT_EQ(s.scale(), 2);
}

TEST(LossScalerTest, StaticNeverMoves) {
  LossScalerConfig c;
  c.kind = LossScalerConfig::Kind::kStatic;
  c.initial_scale = 512;
  MT_ASSERT_OK_AND_ASSIGN(LossScaler s, LossScaler::Create(c));
  for (int i = 0; i < 5; ++i) s.Update(i % 2 == 0);
  EXPECT_EQ(s.scale(), 512);
}

// Every sequence of 12 overflow/no-overflow outcomes, for windows 1..3 and hysteresis 1..3,
// against the transliterated Megatron scaler.
TEST(LossScalerTest, ExhaustiveAgainstMegatron) {
  const int kLength = 12;
  for (int64_t window = 1; window <= 3; ++window) {
    for (int64_t hysteresis = 1; hysteresis <= 3; ++hysteresis) {
      for (uint32_t pattern = 0; pattern < (1u << kLength); ++pattern) {
        MT_ASSERT_OK_AND_ASSIGN(LossScaler s,
                                LossScaler::Create(Dynamic(64, window, hysteresis, 1)));
        MegatronDynamicGradScaler oracle(64, 1, 2.0, 0.5, window, hysteresis);
        for (int i = 0; i < kLength; ++i) {
          const bool inf = (pattern >> i) & 1u;
          s.Update(inf);
          oracle.update(inf);
          ASSERT_EQ(s.scale(), oracle.scale) << "window " << window << " hysteresis " << hysteresis
                                             << " pattern " << pattern << " step " << i;
          ASSERT_EQ(s.growth_tracker(), oracle.growth_tracker);
          ASSERT_EQ(s.hysteresis_tracker(), oracle.hysteresis_tracker);
        }
      }
    }
  }
}

TEST(LossScalerTest, RestoreResumesExactly) {
  MT_ASSERT_OK_AND_ASSIGN(LossScaler a, LossScaler::Create(Dynamic(1024, 3, 2)));
  a.Update(true);
  a.Update(false);
  MT_ASSERT_OK_AND_ASSIGN(LossScaler b, LossScaler::Create(Dynamic(1024, 3, 2)));
  b.Restore(a.scale(), a.growth_tracker(), a.hysteresis_tracker());
  for (bool inf : {false, false, true, true, false}) {
    a.Update(inf);
    b.Update(inf);
    EXPECT_EQ(a.scale(), b.scale());
  }
}

TEST(LossScalerTest, RejectsBadConfigs) {
  EXPECT_THAT(LossScaler::Create(Dynamic(0, 10, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("loss scale")));
  EXPECT_THAT(LossScaler::Create(Dynamic(1024, 0, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("window")));
  EXPECT_THAT(LossScaler::Create(Dynamic(1024, 10, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hysteresis")));
  EXPECT_THAT(LossScaler::Create(Dynamic(1024, 10, 2, /*min=*/2048)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min loss scale")));
  EXPECT_THAT(LossScaler::Create(Dynamic(INFINITY, 10, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
}

}  // namespace
}  // namespace mt::engine
