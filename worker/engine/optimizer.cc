#include "worker/engine/optimizer.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/version.h>

#include <cmath>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::engine {
namespace {

constexpr int64_t kAlignElements = 64;

int64_t AlignUp(int64_t n) { return (n + kAlignElements - 1) / kAlignElements * kAlignElements; }

}  // namespace

absl::StatusOr<OptimizerConfig> OptimizerConfig::FromSpec(const mt::v1::TrainingSpec& t) {
  OptimizerConfig c;
  switch (t.optimizer()) {
    case mt::v1::OPTIMIZER_UNSPECIFIED:
    case mt::v1::OPTIMIZER_ADAM:
      c.kind = Kind::kAdamW;
      break;
    case mt::v1::OPTIMIZER_SGD:
      c.kind = Kind::kSgd;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("training.optimizer: unknown value ", t.optimizer()));
  }
  c.weight_decay = t.has_weight_decay() ? t.weight_decay() : spec::kDefaultWeightDecay;
  c.adam_beta1 = t.has_adam_beta1() ? t.adam_beta1() : spec::kDefaultAdamBeta1;
  c.adam_beta2 = t.has_adam_beta2() ? t.adam_beta2() : spec::kDefaultAdamBeta2;
  c.adam_eps = t.has_adam_eps() ? t.adam_eps() : spec::kDefaultAdamEps;
  c.sgd_momentum = t.has_sgd_momentum() ? t.sgd_momentum() : spec::kDefaultSgdMomentum;
  c.clip_grad = t.has_clip_grad() ? t.clip_grad() : spec::kDefaultClipGrad;
  absl::Status s = c.Validate();
  if (!s.ok()) return s;
  return c;
}

absl::Status OptimizerConfig::Validate() const {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (!(weight_decay >= 0.0)) return bad("training.weight_decay ", weight_decay, " must be >= 0");
  if (!(adam_beta1 >= 0.0 && adam_beta1 < 1.0)) {
    return bad("training.adam_beta1 ", adam_beta1, " must be in [0, 1)");
  }
  if (!(adam_beta2 >= 0.0 && adam_beta2 < 1.0)) {
    return bad("training.adam_beta2 ", adam_beta2, " must be in [0, 1)");
  }
  if (!(adam_eps > 0.0)) return bad("training.adam_eps ", adam_eps, " must be > 0");
  if (!(sgd_momentum >= 0.0 && sgd_momentum < 1.0)) {
    return bad("training.sgd_momentum ", sgd_momentum, " must be in [0, 1)");
  }
  if (!(clip_grad >= 0.0)) return bad("training.clip_grad ", clip_grad, " must be >= 0");
  return absl::OkStatus();
}

bool UsesWeightDecay(const std::string& name, const torch::Tensor& param) {
  return !(absl::EndsWith(name, ".bias") || name == "bias" || param.dim() == 1);
}

absl::StatusOr<std::unique_ptr<MixedPrecisionOptimizer>> MixedPrecisionOptimizer::Create(
    const OptimizerConfig& config, torch::nn::Module& model) {
  absl::Status valid = config.Validate();
  if (!valid.ok()) return valid;
  std::unique_ptr<MixedPrecisionOptimizer> opt(new MixedPrecisionOptimizer(config));

  // Unique trainable parameters, decayed ones first, each group in registration order.
  std::vector<ParamSlot> decay, no_decay;
  std::unordered_set<const void*> seen;
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    ParamSlot slot;
    slot.name = item.key();
    slot.param = p;
    slot.numel = p.numel();
    slot.weight_decay = UsesWeightDecay(slot.name, p);
    (slot.weight_decay ? decay : no_decay).push_back(std::move(slot));
  }
  if (decay.empty() && no_decay.empty()) {
    return absl::InvalidArgumentError("the model has no trainable parameters");
  }
  const torch::Tensor& first = decay.empty() ? no_decay[0].param : decay[0].param;
  const c10::ScalarType dtype = first.scalar_type();
  const c10::Device device = first.device();
  if (dtype != torch::kFloat && dtype != torch::kDouble && dtype != torch::kBFloat16 &&
      dtype != torch::kHalf) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported parameter dtype ", c10::toString(dtype)));
  }
  int64_t offset = 0;
  for (auto* group : {&decay, &no_decay}) {
    for (ParamSlot& slot : *group) {
      if (slot.param.scalar_type() != dtype || slot.param.device() != device) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter ", slot.name, " is ", c10::toString(slot.param.scalar_type()),
                         " on ", slot.param.device().str(), ", others are ", c10::toString(dtype),
                         " on ", device.str()));
      }
      slot.offset = offset;
      offset = AlignUp(offset + slot.numel);
      opt->num_parameters_ += slot.numel;
      opt->slots_.push_back(std::move(slot));
    }
    if (group == &decay) opt->decay_numel_ = offset;
  }
  const int64_t total = offset;

  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  opt->model_flat_ = torch::zeros({total}, options);
  opt->model_grad_flat_ = torch::zeros({total}, options);
  for (ParamSlot& slot : opt->slots_) {
    torch::Tensor view =
        opt->model_flat_.narrow(0, slot.offset, slot.numel).view(slot.param.sizes());
    view.copy_(slot.param);
    slot.param.set_data(view);
    slot.param.mutable_grad() =
        opt->model_grad_flat_.narrow(0, slot.offset, slot.numel).view(slot.param.sizes());
  }
  const c10::ScalarType master_dtype = dtype == torch::kDouble ? torch::kDouble : torch::kFloat;
  opt->master_is_model_ = dtype == master_dtype;
  if (opt->master_is_model_) {
    opt->master_ = opt->model_flat_;
    opt->master_grad_ = opt->model_grad_flat_;
  } else {
    opt->master_ = opt->model_flat_.to(master_dtype);
    opt->master_grad_ = torch::zeros({total}, options.dtype(master_dtype));
  }
  const auto master_options = options.dtype(master_dtype);
  if (config.kind == OptimizerConfig::Kind::kAdamW) {
    opt->exp_avg_ = torch::zeros({total}, master_options);
    opt->exp_avg_sq_ = torch::zeros({total}, master_options);
    opt->scratch_ = torch::empty({total}, master_options);
  } else if (config.sgd_momentum > 0.0) {
    opt->momentum_ = torch::zeros({total}, master_options);
  }
  return opt;
}

torch::Tensor MixedPrecisionOptimizer::MasterParam(const ParamSlot& slot) const {
  return master_.narrow(0, slot.offset, slot.numel).view(slot.param.sizes());
}

bool MixedPrecisionOptimizer::Fp32Accumulation() const {
  return !master_is_model_ && config_.accumulate_grads_in_fp32;
}

void MixedPrecisionOptimizer::ZeroGrad() {
  torch::NoGradGuard no_grad;
  SyncGradViews();
  model_grad_flat_.zero_();
  // The master gradients are overwritten by the first fold (FoldIntoMaster), not zeroed: one
  // pass over them less per step.
  master_grad_holds_step_ = false;
}

void MixedPrecisionOptimizer::FinishMicroBatch() {
  if (!Fp32Accumulation()) return;
  torch::NoGradGuard no_grad;
  SyncGradViews();
  FoldIntoMaster();
}

void MixedPrecisionOptimizer::FoldIntoMaster() {
  if (master_grad_holds_step_) {
    master_grad_.add_(model_grad_flat_);
  } else {
    master_grad_.copy_(model_grad_flat_);
    master_grad_holds_step_ = true;
  }
  model_grad_flat_.zero_();
}

void MixedPrecisionOptimizer::SyncGradViews() {
  torch::NoGradGuard no_grad;
  for (ParamSlot& slot : slots_) {
    torch::Tensor& grad = slot.param.mutable_grad();
    torch::Tensor view = model_grad_flat_.narrow(0, slot.offset, slot.numel);
    if (grad.defined() && grad.data_ptr() == view.data_ptr()) continue;
    // Someone replaced or reset .grad: take its value and point it back into the buffer.
    if (grad.defined()) {
      view.copy_(grad.reshape({-1}));
    } else {
      view.zero_();
    }
    grad = view.view(slot.param.sizes());
  }
}

std::vector<torch::Tensor> MixedPrecisionOptimizer::GradientBuckets(int64_t bucket_elements) {
  torch::NoGradGuard no_grad;
  SyncGradViews();
  torch::Tensor buffer = model_grad_flat_;
  if (Fp32Accumulation()) {
    FoldIntoMaster();
    buffer = master_grad_;
  }
  std::vector<torch::Tensor> buckets;
  const int64_t n = buffer.numel();
  const int64_t size = std::max<int64_t>(1, bucket_elements);
  for (int64_t offset = 0; offset < n; offset += size) {
    buckets.push_back(buffer.narrow(0, offset, std::min(size, n - offset)));
  }
  return buckets;
}

OptimizerStepResult MixedPrecisionOptimizer::Step(double lr, double loss_scale) {
  torch::NoGradGuard no_grad;
  SyncGradViews();
  OptimizerStepResult result;
  // 1. fp32 gradients (plus whatever FinishMicroBatch has not folded in yet), unscaled.
  if (Fp32Accumulation()) {
    FoldIntoMaster();
  } else if (!master_is_model_) {
    master_grad_.copy_(model_grad_flat_);
  }
  if (loss_scale != 1.0) master_grad_.mul_(1.0 / loss_scale);
  // 2. One device sync: the norm tells both the clip factor and whether anything overflowed
  //    (an inf or NaN anywhere makes the norm inf or NaN).
  result.grad_norm = master_grad_.norm().item<double>();
  if (!std::isfinite(result.grad_norm)) {
    result.skipped = true;
    return result;
  }
  // 3. Clip by the global norm.
  if (config_.clip_grad > 0.0) {
    const double coeff = config_.clip_grad / (result.grad_norm + 1e-6);
    if (coeff < 1.0) master_grad_.mul_(coeff);
  }
  // 4. Update the master weights, then the model's copy.
  ++step_count_;
  if (config_.kind == OptimizerConfig::Kind::kAdamW) {
    AdamWUpdate(lr);
  } else {
    SgdUpdate(lr);
  }
  if (!master_is_model_) model_flat_.copy_(master_);
  return result;
}

bool MixedPrecisionOptimizer::FusedAdamWUpdate(double lr) {
#if TORCH_VERSION_MAJOR >= 2
  if (!config_.fused_adamw || !master_.is_cuda() || master_.scalar_type() != at::kFloat) {
    return false;
  }
  // The kernel reads each step tensor as Adam's t (torch.optim.AdamW(fused=True) increments
  // them before the call); weight decay is per call, so the decayed and the other parameters
  // go separately.
  const int64_t total = master_.numel();
  auto run = [&](int64_t begin, int64_t end, double weight_decay) {
    if (end <= begin) return;
    std::vector<at::Tensor> params = {master_.narrow(0, begin, end - begin)};
    std::vector<at::Tensor> grads = {master_grad_.narrow(0, begin, end - begin)};
    std::vector<at::Tensor> m = {exp_avg_.narrow(0, begin, end - begin)};
    std::vector<at::Tensor> v = {exp_avg_sq_.narrow(0, begin, end - begin)};
    std::vector<at::Tensor> steps = {
        at::full({}, static_cast<double>(step_count_), master_.options())};
    at::_fused_adamw_(params, grads, m, v, /*max_exp_avg_sqs=*/{}, steps, lr, config_.adam_beta1,
                      config_.adam_beta2, weight_decay, config_.adam_eps, /*amsgrad=*/false,
                      /*maximize=*/false);
  };
  run(0, decay_numel_, config_.weight_decay);
  run(decay_numel_, total, 0.0);
  return true;
#else
  (void)lr;
  return false;
#endif
}

void MixedPrecisionOptimizer::AdamWUpdate(double lr) {
  if (FusedAdamWUpdate(lr)) return;
  const double b1 = config_.adam_beta1;
  const double b2 = config_.adam_beta2;
  const double t = static_cast<double>(step_count_);
  const double bias_correction1 = 1.0 - std::pow(b1, t);
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(b2, t));
  exp_avg_.mul_(b1).add_(master_grad_, 1.0 - b1);
  exp_avg_sq_.mul_(b2).addcmul_(master_grad_, master_grad_, 1.0 - b2);
  if (config_.weight_decay > 0.0 && decay_numel_ > 0) {
    master_.narrow(0, 0, decay_numel_).mul_(1.0 - lr * config_.weight_decay);
  }
  at::sqrt_out(scratch_, exp_avg_sq_);
  scratch_.div_(bias_correction2_sqrt).add_(config_.adam_eps);
  master_.addcdiv_(exp_avg_, scratch_, -lr / bias_correction1);
}

void MixedPrecisionOptimizer::SgdUpdate(double lr) {
  if (config_.weight_decay > 0.0 && decay_numel_ > 0) {
    master_grad_.narrow(0, 0, decay_numel_)
        .add_(master_.narrow(0, 0, decay_numel_), config_.weight_decay);
  }
  if (momentum_.defined()) {
    if (step_count_ == 1) {
      momentum_.copy_(master_grad_);
    } else {
      momentum_.mul_(config_.sgd_momentum).add_(master_grad_);
    }
    master_.add_(momentum_, -lr);
  } else {
    master_.add_(master_grad_, -lr);
  }
}

}  // namespace mt::engine
