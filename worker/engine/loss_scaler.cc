#include "worker/engine/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::engine {

absl::Status LossScalerConfig::Validate() const {
  if (kind == Kind::kNone) return absl::OkStatus();
  if (!(initial_scale > 0.0) || !std::isfinite(initial_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scale ", initial_scale, " must be finite and > 0"));
  }
  if (kind == Kind::kStatic) return absl::OkStatus();
  if (!(min_scale > 0.0) || min_scale > initial_scale) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min loss scale ", min_scale, " must be in (0, initial loss scale ", initial_scale, "]"));
  }
  if (!(growth_factor > 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scale growth factor ", growth_factor, " must be > 1"));
  }
  if (!(backoff_factor > 0.0 && backoff_factor < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scale backoff factor ", backoff_factor, " must be in (0, 1)"));
  }
  if (growth_interval <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scale window ", growth_interval, " must be > 0"));
  }
  if (hysteresis <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("hysteresis ", hysteresis, " must be > 0"));
  }
  return absl::OkStatus();
}

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config),
      scale_(config.kind == LossScalerConfig::Kind::kNone ? 1.0 : config.initial_scale),
      hysteresis_tracker_(config.hysteresis) {}

absl::StatusOr<LossScaler> LossScaler::Create(const LossScalerConfig& config) {
  absl::Status s = config.Validate();
  if (!s.ok()) return s;
  return LossScaler(config);
}

absl::StatusOr<LossScaler> LossScaler::DynamicFromSpec(const mt::v1::TrainingSpec& t) {
  LossScalerConfig c;
  c.kind = LossScalerConfig::Kind::kDynamic;
  c.initial_scale =
      t.has_initial_loss_scale() ? t.initial_loss_scale() : spec::kDefaultInitialLossScale;
  c.min_scale = t.has_min_loss_scale() ? t.min_loss_scale() : spec::kDefaultMinLossScale;
  c.growth_interval =
      t.has_loss_scale_window() ? t.loss_scale_window() : spec::kDefaultLossScaleWindow;
  c.hysteresis = t.has_hysteresis() ? t.hysteresis() : spec::kDefaultHysteresis;
  return Create(c);
}

absl::StatusOr<LossScaler> LossScaler::FromSpec(const mt::v1::TrainingSpec& t) {
  if (t.precision() != mt::v1::PRECISION_FP16) return Create(LossScalerConfig{});
  if (t.has_loss_scale()) {
    LossScalerConfig c;
    c.kind = LossScalerConfig::Kind::kStatic;
    c.initial_scale = t.loss_scale();
    return Create(c);
  }
  return DynamicFromSpec(t);
}

void LossScaler::Update(bool found_inf) {
  if (config_.kind != LossScalerConfig::Kind::kDynamic) return;
  if (found_inf) {
    growth_tracker_ = 0;
    hysteresis_tracker_ -= 1;
    if (hysteresis_tracker_ <= 0) {
      scale_ = std::max(scale_ * config_.backoff_factor, config_.min_scale);
    }
    return;
  }
  growth_tracker_ += 1;
  if (growth_tracker_ == config_.growth_interval) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = config_.hysteresis;
    scale_ *= config_.growth_factor;
  }
}

void LossScaler::Restore(double scale, int64_t growth_tracker, int64_t hysteresis_tracker) {
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  hysteresis_tracker_ = hysteresis_tracker;
}

}  // namespace mt::engine
