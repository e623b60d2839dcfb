#include "worker/engine/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::engine {

const char* LrDecayStyleName(LrDecayStyle style) {
  switch (style) {
    case LrDecayStyle::kConstant:
      return "constant";
    case LrDecayStyle::kLinear:
      return "linear";
    case LrDecayStyle::kCosine:
      return "cosine";
    case LrDecayStyle::kInverseSquareRoot:
      return "inverse-square-root";
  }
  return "unknown";
}

absl::Status LrScheduleConfig::Validate() const {
  if (!(min_lr >= 0.0)) return absl::InvalidArgumentError(absl::StrCat("min_lr ", min_lr, " < 0"));
  if (!(max_lr >= min_lr)) {
    return absl::InvalidArgumentError(absl::StrCat("lr ", max_lr, " < min_lr ", min_lr));
  }
  if (!(init_lr <= max_lr)) {
    return absl::InvalidArgumentError(absl::StrCat("init lr ", init_lr, " > lr ", max_lr));
  }
  if (decay_steps <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr decay steps ", decay_steps, " must be > 0 (samples)"));
  }
  if (!(warmup_steps >= 0.0) || !(warmup_steps < static_cast<double>(decay_steps))) {
    return absl::InvalidArgumentError(absl::StrCat("lr warmup steps ", warmup_steps,
                                                   " must be in [0, decay steps ", decay_steps,
                                                   ") (samples)"));
  }
  return absl::OkStatus();
}

std::string LrScheduleConfig::DebugString() const {
  return absl::StrFormat("%s lr %g -> %g (min %g), warmup %g samples, decay %d samples",
                         LrDecayStyleName(style), init_lr, max_lr, min_lr, warmup_steps,
                         decay_steps);
}

absl::StatusOr<LrSchedule> LrSchedule::Create(const LrScheduleConfig& config) {
  absl::Status s = config.Validate();
  if (!s.ok()) return s;
  return LrSchedule(config);
}

absl::StatusOr<LrSchedule> LrSchedule::FromSpec(const mt::v1::TrainingSpec& t,
                                                int64_t global_batch_size) {
  if (global_batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("global batch size ", global_batch_size, " must be > 0"));
  }
  LrScheduleConfig c;
  c.max_lr = t.lr();
  c.min_lr = t.min_lr();
  switch (t.lr_decay_style()) {
    case mt::v1::LR_DECAY_STYLE_CONSTANT:
      c.style = LrDecayStyle::kConstant;
      break;
    case mt::v1::LR_DECAY_STYLE_COSINE:
      c.style = LrDecayStyle::kCosine;
      break;
    case mt::v1::LR_DECAY_STYLE_INVERSE_SQUARE_ROOT:
      c.style = LrDecayStyle::kInverseSquareRoot;
      break;
    case mt::v1::LR_DECAY_STYLE_UNSPECIFIED:
    case mt::v1::LR_DECAY_STYLE_LINEAR:
      c.style = LrDecayStyle::kLinear;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("training.lr_decay_style: unknown value ", t.lr_decay_style()));
  }
  if (t.train_iters() > 0) {
    const int64_t decay_iters = t.lr_decay_iters() > 0 ? t.lr_decay_iters() : t.train_iters();
    c.decay_steps = decay_iters * global_batch_size;
    c.warmup_steps = t.has_lr_warmup_fraction()
                         ? t.lr_warmup_fraction() * static_cast<double>(c.decay_steps)
                         : static_cast<double>(t.lr_warmup_iters() * global_batch_size);
  } else if (t.train_samples() > 0) {
    c.decay_steps = t.lr_decay_samples() > 0 ? t.lr_decay_samples() : t.train_samples();
    c.warmup_steps = t.has_lr_warmup_fraction()
                         ? t.lr_warmup_fraction() * static_cast<double>(c.decay_steps)
                         : static_cast<double>(t.lr_warmup_samples());
  } else {
    return absl::InvalidArgumentError(
        "training: neither train_iters nor train_samples is set (--train-iters / "
        "--train-samples)");
  }
  return Create(c);
}

double LrSchedule::LearningRate(int64_t num_steps) const {
  const LrScheduleConfig& c = config_;
  const double n = static_cast<double>(num_steps);
  if (c.warmup_steps > 0 && n <= c.warmup_steps) {
    return c.init_lr + (c.max_lr - c.init_lr) * n / c.warmup_steps;
  }
  if (c.style == LrDecayStyle::kConstant) return c.max_lr;
  if (num_steps > c.decay_steps) return c.min_lr;
  if (c.style == LrDecayStyle::kInverseSquareRoot) {
    const double warmup = std::max(c.warmup_steps, 1.0);
    const double steps = std::max(n, 1.0);
    return std::max(c.min_lr, c.max_lr * std::sqrt(warmup) / std::sqrt(steps));
  }
  const double decay_ratio =
      (n - c.warmup_steps) / (static_cast<double>(c.decay_steps) - c.warmup_steps);
  const double delta = c.max_lr - c.min_lr;
  double coeff = 1.0 - decay_ratio;  // linear
  if (c.style == LrDecayStyle::kCosine) coeff = 0.5 * (std::cos(M_PI * decay_ratio) + 1.0);
  return c.min_lr + coeff * delta;
}

}  // namespace mt::engine
