// The optimizer of the single-device trainer: AdamW (or SGD with momentum) over fp32 master
// weights, as Megatron's Float16OptimizerWithFloat16Params / FP32Optimizer.
//
// Memory layout (the same idea as Megatron's contiguous grad buffers and distributed
// optimizer): every parameter of the model becomes a view into one flat buffer of the model's
// dtype, and its .grad a view into one flat gradient buffer, so that
//   - gradients accumulate in place across micro-batches (autograd adds into .grad),
//   - unscaling, the inf/NaN check, the global norm, clipping and the update are a handful of
//     kernels over whole buffers rather than one per parameter,
//   - a later data-parallel layer can all-reduce (or reduce-scatter) one buffer.
// fp32 model: the master weights are the model's parameters (no copy). bf16/fp16 model: an
// fp32 master copy and fp32 gradients, copied back into the model after the update. The
// optimizer state (exp_avg, exp_avg_sq or the momentum buffer) is fp32. An fp64 model (tests)
// keeps everything in fp64. Each parameter starts at a multiple of 64 elements (aligned
// vector loads); the padding is zero and stays zero.
//
// Weight decay follows Megatron's rule: no decay for biases and for 1-D parameters (LayerNorm);
// decayed parameters come first in the buffers so that decay is one kernel on a prefix.
// AdamW is decoupled (torch.optim.AdamW / apex FusedAdam adam_w_mode):
//   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// SGD is torch.optim.SGD as Megatron uses it (L2 decay added to the gradient, momentum
// buffer initialised with the first gradient, no dampening, no Nesterov).
//
// Step(lr, loss_scale): gradients / loss_scale -> global L2 norm -> if not finite, the step is
// skipped and NOTHING changes (weights, moments, step count) -> clip to clip_grad (Megatron:
// coeff = clip / (norm + 1e-6), applied when < 1) -> update.
//
// After Create the model must not be moved or cast (to()) and its .grad must not be replaced;
// zero the gradients with ZeroGrad(). A replaced or reset .grad (e.g. Module::zero_grad with
// set_to_none) is detected and copied back into the buffer, at a cost.
//
// Thread-compatible.
#ifndef MT_WORKER_ENGINE_OPTIMIZER_H_
#define MT_WORKER_ENGINE_OPTIMIZER_H_

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mt::v1 {
class TrainingSpec;
}  // namespace mt::v1

namespace mt::engine {

struct OptimizerConfig {
  enum class Kind { kAdamW, kSgd };
  Kind kind = Kind::kAdamW;
  double weight_decay = 0.01;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double sgd_momentum = 0.9;
  double clip_grad = 1.0;  // global-norm clip; 0 = off
  // 16-bit models: add each micro-batch's gradients into the fp32 master gradients
  // (FinishMicroBatch) rather than accumulating them in 16 bits. Megatron turns this on for
  // bf16 (--accumulate-allreduce-grads-in-fp32); here it is the default for fp16 too.
  bool accumulate_grads_in_fp32 = true;
  // AdamW on CUDA tensors with LibTorch >= 2.0: one fused kernel per step (at::_fused_adamw_)
  // instead of a chain of element-wise passes over the master weights. Same math.
  bool fused_adamw = true;

  // Unset fields take the defaults of proto/mt/v1/job_spec.proto.
  static absl::StatusOr<OptimizerConfig> FromSpec(const mt::v1::TrainingSpec& training);
  absl::Status Validate() const;
};

struct OptimizerStepResult {
  bool skipped = false;    // a gradient was inf or NaN; nothing was changed
  double grad_norm = 0.0;  // L2 norm of all unscaled gradients before clipping
};

// Megatron's no-weight-decay rule: biases and 1-D parameters.
bool UsesWeightDecay(const std::string& name, const torch::Tensor& param);

class MixedPrecisionOptimizer {
 public:
  // Takes over the parameters of `model` (see the file comment). Errors: no parameters,
  // parameters on several devices or of several dtypes, an unsupported dtype.
  static absl::StatusOr<std::unique_ptr<MixedPrecisionOptimizer>> Create(
      const OptimizerConfig& config, torch::nn::Module& model);

  // Zeroes the gradients (call before the first micro-batch of a step).
  void ZeroGrad();
  // Call after each micro-batch's backward: with accumulate_grads_in_fp32 and a 16-bit model,
  // folds the micro-batch's gradients into the fp32 master gradients; otherwise a no-op.
  void FinishMicroBatch();
  OptimizerStepResult Step(double lr, double loss_scale);
  // The buffer that holds this step's accumulated gradients (fp32 master gradients when they
  // accumulate there, the model-dtype buffer otherwise), as consecutive views of at most
  // `bucket_elements` each, for data-parallel averaging between the last micro-batch and
  // Step(). Reducing the views in place changes what Step() applies.
  std::vector<torch::Tensor> GradientBuckets(int64_t bucket_elements);

  // Successful (not skipped) steps so far: Adam's t.
  int64_t step_count() const { return step_count_; }
  // Checkpoints (worker/checkpoint/trainer_state.cc): Adam's t of a restored state.
  void RestoreStepCount(int64_t steps) { step_count_ = steps; }
  const OptimizerConfig& config() const { return config_; }

  struct ParamSlot {
    std::string name;
    torch::Tensor param;  // the model's parameter (a view into the model buffer)
    int64_t offset = 0;   // in elements, into every flat buffer
    int64_t numel = 0;
    bool weight_decay = true;
  };
  const std::vector<ParamSlot>& slots() const { return slots_; }
  // Flat buffers (checkpoints, tests). exp_avg/exp_avg_sq are undefined for SGD, momentum
  // undefined for AdamW.
  const torch::Tensor& master_params() const { return master_; }
  const torch::Tensor& master_grads() const { return master_grad_; }
  const torch::Tensor& exp_avg() const { return exp_avg_; }
  const torch::Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  const torch::Tensor& momentum() const { return momentum_; }
  // The master copy of one parameter, shaped like it.
  torch::Tensor MasterParam(const ParamSlot& slot) const;
  int64_t num_parameters() const { return num_parameters_; }

 private:
  explicit MixedPrecisionOptimizer(const OptimizerConfig& config) : config_(config) {}
  void SyncGradViews();
  bool Fp32Accumulation() const;
  void AdamWUpdate(double lr);
  // The fused kernel; false when this LibTorch or device has none (the caller falls back).
  bool FusedAdamWUpdate(double lr);
  // Adds (or, first in a step, copies) the model-dtype gradients into the fp32 master
  // gradients and zeroes the former.
  void FoldIntoMaster();
  void SgdUpdate(double lr);

  OptimizerConfig config_;
  std::vector<ParamSlot> slots_;
  int64_t num_parameters_ = 0;  // without padding
  int64_t decay_numel_ = 0;     // decayed parameters occupy [0, decay_numel_)
  bool master_is_model_ = false;
  torch::Tensor model_flat_;             // the model's dtype; parameters are views
  torch::Tensor model_grad_flat_;        // the model's dtype; .grad are views
  bool master_grad_holds_step_ = false;  // master_grad_ has this step's gradients so far
  torch::Tensor master_;                 // fp32 (fp64 for an fp64 model); == model_flat_ when fp32
  torch::Tensor master_grad_;
  torch::Tensor exp_avg_;
  torch::Tensor exp_avg_sq_;
  torch::Tensor momentum_;
  torch::Tensor scratch_;
  int64_t step_count_ = 0;
};

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_OPTIMIZER_H_
