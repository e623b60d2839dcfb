// fp16 loss scaling as Megatron-LM does it (megatron/core/optimizer/grad_scaler.py).
//
// The trainer multiplies the loss by scale() before backward, the optimizer divides the
// gradients by it, finds whether any is inf/NaN, and the step is skipped when one is (the
// optimizer state is then left untouched). Update(found_inf) then moves the scale:
//
//   DynamicGradScaler (Megatron's defaults: initial 2^32, growth x2, backoff x0.5,
//   growth_interval = --loss-scale-window 1000, --hysteresis 2, --min-loss-scale 1):
//     overflow:    growth_tracker = 0; hysteresis_tracker -= 1;
//                  if hysteresis_tracker <= 0: scale = max(scale * backoff, min_scale)
//     no overflow: growth_tracker += 1;
//                  if growth_tracker == growth_interval:
//                    growth_tracker = 0; hysteresis_tracker = hysteresis; scale *= growth
//   Note that the hysteresis budget is refilled only when the scale grows: once it is spent,
//   every further overflow halves the scale (Megatron's behaviour, kept on purpose).
//
//   Static (--loss-scale S): scale S forever; an overflow still skips the step.
//   None (fp32/bf16): scale 1; a non-finite gradient still skips the step.
//
// Pure: no LibTorch, no I/O. Thread-compatible.
#ifndef MT_WORKER_ENGINE_LOSS_SCALER_H_
#define MT_WORKER_ENGINE_LOSS_SCALER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mt::v1 {
class TrainingSpec;
}  // namespace mt::v1

namespace mt::engine {

struct LossScalerConfig {
  enum class Kind {
    kNone,     // scale 1 (fp32, bf16)
    kStatic,   // a fixed scale
    kDynamic,  // DynamicGradScaler
  };
  Kind kind = Kind::kNone;
  double initial_scale = 4294967296.0;  // 2^32; the fixed scale for kStatic
  double min_scale = 1.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 1000;  // --loss-scale-window
  int64_t hysteresis = 2;

  absl::Status Validate() const;
};

class LossScaler {
 public:
  static absl::StatusOr<LossScaler> Create(const LossScalerConfig& config);
  // fp16: dynamic unless training.loss_scale is set (static); otherwise kNone. Unset fields
  // take the defaults of proto/mt/v1/job_spec.proto.
  static absl::StatusOr<LossScaler> FromSpec(const mt::v1::TrainingSpec& training);
  // The spec's dynamic settings whatever the precision (TrainerOptions::
  // force_dynamic_loss_scaling; tests).
  static absl::StatusOr<LossScaler> DynamicFromSpec(const mt::v1::TrainingSpec& training);

  double scale() const { return scale_; }
  // Record the outcome of one optimizer step (found_inf = a gradient was inf or NaN).
  void Update(bool found_inf);

  const LossScalerConfig& config() const { return config_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t hysteresis_tracker() const { return hysteresis_tracker_; }

  // For checkpoints: the whole state is (scale, growth_tracker, hysteresis_tracker).
  void Restore(double scale, int64_t growth_tracker, int64_t hysteresis_tracker);

 private:
  explicit LossScaler(const LossScalerConfig& config);

  LossScalerConfig config_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_tracker_;
};

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_LOSS_SCALER_H_
