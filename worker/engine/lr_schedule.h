// Learning-rate schedule of Megatron-LM (megatron/core/optimizer_param_scheduler.py), as a pure
// function: linear warmup from init_lr to max_lr, then constant, linear, cosine or
// inverse-square-root decay to min_lr over the decay steps, min_lr after them.
//
// Megatron counts schedule "steps" in samples (each optimizer step adds the global batch
// size), so that --lr-warmup-fraction can give a warmup that is not a whole number of
// iterations. LrSchedule keeps that convention: FromSpec converts iterations to samples, and
// LearningRate(num_steps) takes the number of samples consumed before the step whose rate it
// returns (0 for the first optimizer step, so with warmup the first step runs at init_lr = 0,
// exactly as in Megatron).
//
// Formulas (n = num_steps, W = warmup_steps, D = decay_steps):
//   n <= W and W > 0          lr = init_lr + (max_lr - init_lr) * n / W
//   constant                  lr = max_lr
//   n > D                     lr = min_lr
//   inverse-square-root       lr = max(min_lr, max_lr * sqrt(max(W, 1)) / sqrt(max(n, 1)))
//   r = (n - W) / (D - W)
//   linear                    lr = min_lr + (1 - r) * (max_lr - min_lr)
//   cosine                    lr = min_lr + 0.5 * (cos(pi * r) + 1) * (max_lr - min_lr)
//
// Pure: no LibTorch, no I/O. Thread-safe (immutable after construction).
#ifndef MT_WORKER_ENGINE_LR_SCHEDULE_H_
#define MT_WORKER_ENGINE_LR_SCHEDULE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mt::v1 {
class TrainingSpec;
}  // namespace mt::v1

namespace mt::engine {

enum class LrDecayStyle {
  kConstant,           // max_lr after warmup
  kLinear,             // linear to min_lr at decay_steps (Megatron's default)
  kCosine,             // half a cosine period to min_lr at decay_steps
  kInverseSquareRoot,  // max_lr * sqrt(warmup / step), floored at min_lr
};

const char* LrDecayStyleName(LrDecayStyle style);

struct LrScheduleConfig {
  double init_lr = 0.0;  // Megatron's --lr-warmup-init
  double max_lr = 0.0;
  double min_lr = 0.0;
  double warmup_steps = 0.0;  // in samples; a double because of --lr-warmup-fraction
  int64_t decay_steps = 1;    // in samples, > 0
  LrDecayStyle style = LrDecayStyle::kLinear;

  // Megatron's asserts: 0 <= min_lr <= max_lr, init_lr <= max_lr, decay_steps > 0,
  // 0 <= warmup_steps < decay_steps.
  absl::Status Validate() const;
  std::string DebugString() const;
};

class LrSchedule {
 public:
  // Validates the config.
  static absl::StatusOr<LrSchedule> Create(const LrScheduleConfig& config);

  // Megatron's mapping of the training spec (training.py get_optimizer_param_scheduler):
  //   with train_iters:   decay = (lr_decay_iters or train_iters) * global_batch,
  //                       warmup = lr_warmup_fraction * decay or lr_warmup_iters * global_batch;
  //   with train_samples: decay = lr_decay_samples or train_samples,
  //                       warmup = lr_warmup_fraction * decay or lr_warmup_samples.
  // Unset fields take the defaults of proto/mt/v1/job_spec.proto.
  static absl::StatusOr<LrSchedule> FromSpec(const mt::v1::TrainingSpec& training,
                                             int64_t global_batch_size);

  // The learning rate after `num_steps` samples (see the file comment).
  double LearningRate(int64_t num_steps) const;
  // Convenience: the rate for optimizer step `iteration` (0-based) at a fixed global batch.
  double LearningRateAtIteration(int64_t iteration, int64_t global_batch_size) const {
    return LearningRate(iteration * global_batch_size);
  }

  const LrScheduleConfig& config() const { return config_; }

 private:
  explicit LrSchedule(const LrScheduleConfig& config) : config_(config) {}
  LrScheduleConfig config_;
};

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_LR_SCHEDULE_H_
