#include "worker/engine/optimizer.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/engine/update_stream.h"
#include "worker/kernels/adamw.h"
#include "worker/model/sharding.h"
#include "worker/parallel/grad_reducer.h"
#include "worker/parallel/process_groups.h"

namespace mt::engine {
namespace {

constexpr int64_t kAlignElements = 64;

int64_t AlignUp(int64_t n) { return (n + kAlignElements - 1) / kAlignElements * kAlignElements; }

// The master weights' dtype: fp32, or fp64 for an fp64 model.
c10::ScalarType MasterDtype(c10::ScalarType model_dtype) {
  return model_dtype == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// The L2 norm of `t`, accumulated (and returned) in `acc`.
torch::Tensor L2Norm(const torch::Tensor& t, c10::ScalarType acc) {
  return at::linalg_vector_norm(t, 2, at::OptionalIntArrayRef(), /*keepdim=*/false, acc);
}

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
  if (num_micro_batches < 1) {
    return bad("optimizer: num_micro_batches ", num_micro_batches, " must be >= 1");
  }
  if (chunk_elements < 1) return bad("optimizer: chunk_elements ", chunk_elements, " must be >= 1");
  return absl::OkStatus();
}

bool UsesWeightDecay(const std::string& name, const torch::Tensor& param) {
  return !(absl::EndsWith(name, ".bias") || name == "bias" || param.dim() == 1);
}

std::vector<std::pair<std::string, torch::Tensor>> TrainableParameters(torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::unordered_set<const void*> seen;
  for (const auto& item : module.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) {
      out.emplace_back(item.key(), p);
    }
  }
  return out;
}

bool OptimizerStepResult::skipped() const {
  return found_inf_.defined() && found_inf_.item<double>() != 0.0;
}

double OptimizerStepResult::grad_norm() const {
  return grad_norm_.defined() ? grad_norm_.item<double>() : 0.0;
}

// Marks a parameter's gradient ready for its bucket's DP reduction (overlap_grad_reduce). A
// post-hook of the parameter's gradient accumulator (AccumulateGrad): it runs once per backward,
// after the gradient has been added into .grad. The same API exists in LibTorch 1.13 and 2.x
// (PyTorch's own DDP reducer uses it).
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(MixedPrecisionOptimizer* opt, size_t slot) : opt_(opt), slot_(slot) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    opt_->OnGradReady(slot_);
    return outputs;
  }

 private:
  MixedPrecisionOptimizer* opt_;
  size_t slot_;
};

absl::StatusOr<std::unique_ptr<MixedPrecisionOptimizer>> MixedPrecisionOptimizer::Create(
    const OptimizerConfig& config, torch::nn::Module& model,
    const OptimizerParallelConfig& parallel) {
  MT_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<MixedPrecisionOptimizer> opt(new MixedPrecisionOptimizer(config, parallel));
  MT_RETURN_IF_ERROR(opt->Init(model));
  return opt;
}

MixedPrecisionOptimizer::MixedPrecisionOptimizer(const OptimizerConfig& config,
                                                 const OptimizerParallelConfig& parallel)
    : config_(config), parallel_(parallel) {}

MixedPrecisionOptimizer::~MixedPrecisionOptimizer() {
  // The hooks point at this object; the model (and its gradient accumulators) may outlive it.
  for (size_t i = 0; i < grad_accumulators_.size(); ++i) {
    grad_accumulators_[i]->del_post_hook(hook_keys_[i]);
  }
  if (reducer_ != nullptr) {
    (void)reducer_->WaitReductions();
    (void)reducer_->WaitGathers();
  }
}

namespace {

// Merges touching ranges.
std::vector<std::pair<int64_t, int64_t>> Merge(std::vector<std::pair<int64_t, int64_t>> ranges) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& r : ranges) {
    if (r.second <= r.first) continue;
    if (!out.empty() && out.back().second == r.first) {
      out.back().second = r.second;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

// `ranges` (sorted, disjoint) intersected with the flat ranges of `segments` (sorted).
std::vector<std::pair<int64_t, int64_t>> Intersect(
    const std::vector<std::pair<int64_t, int64_t>>& ranges,
    const std::vector<MixedPrecisionOptimizer::Segment>& segments) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& seg : segments) {
    const int64_t sb = seg.flat_begin, se = seg.flat_begin + seg.numel;
    for (const auto& r : ranges) {
      const int64_t b = std::max(sb, r.first), e = std::min(se, r.second);
      if (b < e) out.emplace_back(b, e);
    }
  }
  std::sort(out.begin(), out.end());
  return Merge(std::move(out));
}

}  // namespace

// A trainable parameter before it has a place in the flat buffers, with what orders it.
struct MixedPrecisionOptimizer::Candidate {
  ParamSlot slot;
  bool replicated = false;  // the same on every TP rank
  bool late = false;        // OptimizerParallelConfig::late_gradient
  int64_t index = 0;        // registration order
};

// The flat buffers' shape: the DP buckets over them, their length and the decay boundary.
struct MixedPrecisionOptimizer::FlatLayout {
  std::vector<parallel::GradReducer::Range> buckets;
  int64_t total = 0;      // elements, padding included
  int64_t decay_end = 0;  // the parameters without weight decay start here
};

absl::Status MixedPrecisionOptimizer::Init(torch::nn::Module& model) {
  const parallel::ProcessGroups* groups = parallel_.groups.get();
  const int dp_size = groups != nullptr ? groups->dp().size : 1;
  const bool shard = parallel_.use_distributed_optimizer && dp_size > 1;
  MT_ASSIGN_OR_RETURN(std::vector<Candidate> candidates, CollectParameters(model));
  const c10::ScalarType dtype = candidates[0].slot.param.scalar_type();
  const c10::Device device = candidates[0].slot.param.device();
  MT_RETURN_IF_ERROR(ChooseGradientPlacement(dtype, device, dp_size));
  MT_ASSIGN_OR_RETURN(FlatLayout layout,
                      LayOutFlatBuffers(std::move(candidates), dtype, device,
                                        /*bucket_align=*/kAlignElements * (shard ? dp_size : 1)));
  AssignSegments(layout, shard);
  AllocateBuffers(layout.total, dtype, device);
  const size_t num_buckets = layout.buckets.size();
  SetUpReducer(layout, shard, device);
  MT_RETURN_IF_ERROR(AssignModelChunks());
  if (shard && parallel_.overlap_param_gather && parallel_.forward_part) {
    OrderParameterGathers(num_buckets);
  }
  MT_RETURN_IF_ERROR(InstallGradReadyHooks());
  return SetUpUpdateStream(device);
}

// Unique trainable parameters (file comment: decayed first, each group in reverse
// registration order, TP-replicated ones last within it).
absl::StatusOr<std::vector<MixedPrecisionOptimizer::Candidate>>
MixedPrecisionOptimizer::CollectParameters(torch::nn::Module& model) const {
  const parallel::ProcessGroups* groups = parallel_.groups.get();
  const int tp_rank = groups != nullptr ? groups->tp_rank() : 0;
  std::vector<Candidate> candidates;
  for (const auto& [name, p] : TrainableParameters(model)) {
    Candidate c;
    c.slot.name = name;
    c.slot.param = p;
    c.slot.numel = p.numel();
    c.slot.weight_decay = UsesWeightDecay(name, p);
    c.replicated = model::TensorParallelSplit(c.slot.name) == model::TpSplit::kReplicated;
    c.late = parallel_.late_gradient && parallel_.late_gradient(c.slot.name);
    const bool duplicate = parallel_.norm_duplicate && parallel_.norm_duplicate(c.slot.name);
    c.slot.counted_in_norm = !(c.replicated && tp_rank != 0) && !duplicate;
    c.index = static_cast<int64_t>(candidates.size());
    candidates.push_back(std::move(c));
  }
  if (candidates.empty()) {
    return absl::InvalidArgumentError("the model has no trainable parameters");
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.slot.weight_decay != b.slot.weight_decay) return a.slot.weight_decay;
                     if (a.late != b.late) return b.late;
                     if (a.replicated != b.replicated) return b.replicated;
                     return a.index > b.index;
                   });
  return candidates;
}

// Where the gradients live (file comment): sets master_is_model_, needs_conversion_ and
// per_param_grads_, after checking that the parameters' dtype and device can be trained here.
absl::Status MixedPrecisionOptimizer::ChooseGradientPlacement(c10::ScalarType dtype,
                                                              c10::Device device, int dp_size) {
  const parallel::ProcessGroups* groups = parallel_.groups.get();
  if (dtype != torch::kFloat && dtype != torch::kDouble && dtype != torch::kBFloat16 &&
      dtype != torch::kHalf) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported parameter dtype ", c10::toString(dtype)));
  }
  const bool dp_active = groups != nullptr && groups->dp().active();
  if (dp_active && groups->is_cuda() != device.is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data-parallel group runs ", groups->backend(), " but the parameters are on ",
        device.str(), ": use nccl for CUDA parameters and gloo for CPU ones"));
  }
  master_is_model_ = dtype == MasterDtype(dtype);
  const bool fp32_grads =
      !master_is_model_ &&
      (dtype == torch::kHalf ||
       (config_.accumulate_grads_in_fp32 && (config_.num_micro_batches > 1 || dp_size > 1)));
  needs_conversion_ = !master_is_model_ && !fp32_grads;
  per_param_grads_ = needs_conversion_ && !dp_active;
  if (dp_active && !groups->is_cuda() && needs_conversion_) {
    return absl::InvalidArgumentError(
        "data parallelism over gloo cannot sum 16-bit gradients (gloo has no bf16): keep "
        "accumulate_grads_in_fp32 on");
  }
  return absl::OkStatus();
}

// Offsets and buckets: fills slots_, bucket_slots_, slot_bucket_ and num_parameters_. A bucket
// closes once it holds bucket_elements (Megatron's rule); its length is padded to a multiple of
// `bucket_align` (dp * 64 with sharding, so that every rank's slice is equal and aligned).
absl::StatusOr<MixedPrecisionOptimizer::FlatLayout> MixedPrecisionOptimizer::LayOutFlatBuffers(
    std::vector<Candidate> candidates, c10::ScalarType dtype, c10::Device device,
    int64_t bucket_align) {
  const int64_t bucket_limit =
      parallel_.bucket_elements > 0 ? parallel_.bucket_elements : int64_t{40'000'000};
  FlatLayout layout;
  int64_t offset = 0;
  int64_t bucket_begin = 0;
  int64_t decay_end = -1;
  auto close_bucket = [&]() {
    if (offset == bucket_begin) return;
    offset = (offset + bucket_align - 1) / bucket_align * bucket_align;
    layout.buckets.push_back({bucket_begin, offset});
    bucket_begin = offset;
    bucket_slots_.emplace_back();
  };
  bucket_slots_.emplace_back();
  for (Candidate& c : candidates) {
    ParamSlot& slot = c.slot;
    if (slot.param.scalar_type() != dtype || slot.param.device() != device) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter ", slot.name, " is ", c10::toString(slot.param.scalar_type()), " on ",
          slot.param.device().str(), ", others are ", c10::toString(dtype), " on ", device.str()));
    }
    if (!slot.weight_decay && decay_end < 0) decay_end = offset;
    slot.offset = offset;
    offset = AlignUp(offset + slot.numel);
    num_parameters_ += slot.numel;
    bucket_slots_.back().push_back(slots_.size());
    slot_bucket_.push_back(layout.buckets.size());
    slots_.push_back(std::move(slot));
    if (offset - bucket_begin >= bucket_limit) close_bucket();
  }
  close_bucket();
  bucket_slots_.pop_back();  // the empty one close_bucket opened last
  layout.total = offset;
  layout.decay_end = decay_end < 0 ? layout.total : decay_end;
  return layout;
}

// This rank's segments (and state_numel_), then the norm ranges within them.
void MixedPrecisionOptimizer::AssignSegments(const FlatLayout& layout, bool shard) {
  const int64_t total = layout.total;
  const int64_t decay_end = layout.decay_end;
  if (per_param_grads_) {
    // One per parameter: the update reads each parameter's own .grad.
    for (size_t i = 0; i < slots_.size(); ++i) {
      const ParamSlot& slot = slots_[i];
      segments_.push_back(
          {slot.offset, slot.offset, slot.numel, slot.weight_decay, static_cast<int64_t>(i)});
    }
  } else if (!shard) {
    if (decay_end > 0) segments_.push_back({0, 0, decay_end, true});
    if (total > decay_end) segments_.push_back({decay_end, decay_end, total - decay_end, false});
  } else {
    const parallel::ProcessGroups& groups = *parallel_.groups;
    const int dp_size = groups.dp().size;
    int64_t local = 0;
    for (const auto& b : layout.buckets) {
      const int64_t part = (b.end - b.begin) / dp_size;
      const int64_t sb = b.begin + part * groups.dp_rank(), se = sb + part;
      const int64_t cut = std::clamp(decay_end, sb, se);
      if (cut > sb) segments_.push_back({sb, local, cut - sb, true});
      local += cut - sb;
      if (se > cut) segments_.push_back({cut, local, se - cut, false});
      local += se - cut;
    }
  }
  for (const Segment& s : segments_) state_numel_ += s.numel;
  if (!shard) state_numel_ = total;  // local offsets are flat offsets

  // Norm ranges: each slot's span to its aligned end, merged, within this rank's segments.
  std::vector<std::pair<int64_t, int64_t>> counted, excluded;
  for (const ParamSlot& slot : slots_) {
    (slot.counted_in_norm ? counted : excluded)
        .emplace_back(slot.offset, AlignUp(slot.offset + slot.numel));
  }
  norm_ranges_ = Intersect(Merge(counted), segments_);
  excluded_ranges_ = Intersect(Merge(excluded), segments_);
}

// The flat model buffers (parameters and .grad become views of them), the master copy and the
// optimizer state.
void MixedPrecisionOptimizer::AllocateBuffers(int64_t total, c10::ScalarType dtype,
                                              c10::Device device) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  model_flat_ = torch::zeros({total}, options);
  if (!per_param_grads_) model_grad_flat_ = torch::zeros({total}, options);
  for (ParamSlot& slot : slots_) {
    torch::Tensor view = model_flat_.narrow(0, slot.offset, slot.numel).view(slot.param.sizes());
    view.copy_(slot.param);
    slot.param.set_data(view);
    if (per_param_grads_) {
      slot.param.mutable_grad().reset();
    } else {
      slot.param.mutable_grad() =
          model_grad_flat_.narrow(0, slot.offset, slot.numel).view(slot.param.sizes());
    }
  }
  const auto master_options = options.dtype(MasterDtype(dtype));
  if (master_is_model_) {
    master_ = model_flat_;
    master_grad_ = model_grad_flat_;
  } else {
    master_ = torch::zeros({state_numel_}, master_options);
    for (const Segment& s : segments_) {
      master_.narrow(0, s.local_begin, s.numel).copy_(model_flat_.narrow(0, s.flat_begin, s.numel));
    }
    const bool fp32_grads = !needs_conversion_;  // ChooseGradientPlacement
    if (fp32_grads) master_grad_ = torch::zeros({total}, master_options);
  }
  if (config_.kind == OptimizerConfig::Kind::kAdamW) {
    exp_avg_ = torch::zeros({state_numel_}, master_options);
    exp_avg_sq_ = torch::zeros({state_numel_}, master_options);
  } else if (config_.sgd_momentum > 0.0) {
    momentum_ = torch::zeros({state_numel_}, master_options);
  }
  step_ = torch::zeros({}, options.dtype(torch::kFloat));
}

// Data parallelism: the reducer over the layout's buckets (a local one without an active DP group)
// and the per-slot and per-bucket bookkeeping of the gradient-ready hooks.
void MixedPrecisionOptimizer::SetUpReducer(FlatLayout& layout, bool shard, c10::Device device) {
  const parallel::ProcessGroups* groups = parallel_.groups.get();
  std::vector<parallel::GradReducer::Range> buckets = std::move(layout.buckets);
  const size_t num_buckets = buckets.size();
  if (groups != nullptr && groups->dp().active()) {
    reducer_ = std::make_unique<parallel::GradReducer>(groups->dp(), groups->is_cuda(), shard,
                                                       std::move(buckets));
  } else {
    reducer_ = std::make_unique<parallel::GradReducer>(parallel::GroupHandle{}, device.is_cuda(),
                                                       /*shard=*/false, std::move(buckets));
  }
  slot_ready_.assign(slots_.size(), false);
  for (const ParamSlot& slot : slots_) {
    slot_late_.push_back(parallel_.late_gradient && parallel_.late_gradient(slot.name));
  }
  bucket_pending_.assign(num_buckets, 0);
  bucket_folded_.assign(num_buckets, false);
  bucket_started_.assign(num_buckets, false);
}

// Each slot's model chunk (OptimizerParallelConfig::model_chunk), in [0, 64).
absl::Status MixedPrecisionOptimizer::AssignModelChunks() {
  int num_chunks = 1;
  for (const ParamSlot& slot : slots_) {
    const int c = parallel_.model_chunk ? parallel_.model_chunk(slot.name) : 0;
    if (c < 0 || c >= 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", slot.name, " is in model chunk ", c, ", not in [0, 64)"));
    }
    slot_chunk_.push_back(c);
    num_chunks = std::max(num_chunks, c + 1);
  }
  chunk_armed_.assign(num_chunks, false);
  return absl::OkStatus();
}

// Gathers start in the order the forward needs them (the same on every DP rank: the same
// model), so that waiting for the first parts does not wait behind the others.
void MixedPrecisionOptimizer::OrderParameterGathers(size_t num_buckets) {
  bucket_first_part_.assign(num_buckets, std::numeric_limits<int64_t>::max());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const int64_t part = std::max<int64_t>(0, parallel_.forward_part(slots_[i].name));
    int64_t& first = bucket_first_part_[slot_bucket_[i]];
    first = std::min(first, part);
  }
  for (size_t b = 0; b < num_buckets; ++b) gather_order_.push_back(b);
  std::stable_sort(gather_order_.begin(), gather_order_.end(), [this](size_t a, size_t b) {
    return bucket_first_part_[a] < bucket_first_part_[b];
  });
}

// overlap_update (OptimizerConfig says where it applies). A parameter the forward does not name
// a part for is updated with part 0.
absl::Status MixedPrecisionOptimizer::SetUpUpdateStream(c10::Device device) {
  const bool applies = config_.overlap_update && parallel_.forward_part &&
                       config_.kind == OptimizerConfig::Kind::kAdamW && UsesFusedKernels() &&
                       per_param_grads_ && !reducer_->shard() && UpdateStream::Available();
  if (!applies) return absl::OkStatus();
  segment_part_.clear();
  int64_t parts = 1;
  for (const Segment& s : segments_) {
    const int64_t part = std::max<int64_t>(0, parallel_.forward_part(slots_[s.slot].name));
    segment_part_.push_back(part);
    parts = std::max(parts, part + 1);
  }
  MT_ASSIGN_OR_RETURN(update_stream_, UpdateStream::Create(device, parts));
  return absl::OkStatus();
}

// overlap_grad_reduce: a GradReadyHook on every parameter's gradient accumulator.
absl::Status MixedPrecisionOptimizer::InstallGradReadyHooks() {
  if (!parallel_.overlap_grad_reduce || !reducer_->active()) return absl::OkStatus();
  for (size_t i = 0; i < slots_.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> acc =
        torch::autograd::impl::grad_accumulator(slots_[i].param);
    if (acc == nullptr) {
      return absl::InternalError(
          absl::StrCat("parameter ", slots_[i].name, " has no gradient accumulator"));
    }
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<GradReadyHook>(this, i)));
    grad_accumulators_.push_back(std::move(acc));
  }
  return absl::OkStatus();
}

torch::Tensor MixedPrecisionOptimizer::SlotGradient(const ParamSlot& slot) const {
  if (has_fp32_master_grads()) return master_grad_.narrow(0, slot.offset, slot.numel);
  if (model_grad_flat_.defined()) return model_grad_flat_.narrow(0, slot.offset, slot.numel);
  const torch::Tensor& g = slot.param.grad();
  return g.defined() ? g.view({-1}) : g;
}

bool MixedPrecisionOptimizer::distributed() const {
  return reducer_ != nullptr && reducer_->shard();
}

torch::Tensor MixedPrecisionOptimizer::MasterParam(const ParamSlot& slot) const {
  if (reducer_ != nullptr && reducer_->shard() && !master_is_model_) return torch::Tensor();
  return master_.narrow(0, slot.offset, slot.numel).view(slot.param.sizes());
}

torch::Tensor MixedPrecisionOptimizer::MasterView(const Segment& s) const {
  return master_is_model_ ? model_flat_.narrow(0, s.flat_begin, s.numel)
                          : master_.narrow(0, s.local_begin, s.numel);
}

int64_t MixedPrecisionOptimizer::step_count() const {
  return static_cast<int64_t>(step_.item<double>());
}

std::vector<std::pair<int64_t, int64_t>> MixedPrecisionOptimizer::buckets() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& b : reducer_->buckets()) out.emplace_back(b.begin, b.end);
  return out;
}

MixedPrecisionOptimizer::MemoryBytes MixedPrecisionOptimizer::memory_bytes() const {
  auto bytes = [](const torch::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : int64_t{0};
  };
  MemoryBytes m;
  m.params = bytes(model_flat_);
  m.grads = bytes(model_grad_flat_);
  m.master_params = master_is_model_ ? 0 : bytes(master_);
  m.master_grads = has_fp32_master_grads() ? bytes(master_grad_) : 0;
  m.optimizer_state = bytes(exp_avg_) + bytes(exp_avg_sq_) + bytes(momentum_);
  // The kernel update reads the 16-bit gradients as they are: no conversion chunk.
  const bool kernel_update = config_.kind == OptimizerConfig::Kind::kAdamW && UsesFusedKernels();
  if (needs_conversion_ && !kernel_update) {
    m.temporary = std::min(config_.chunk_elements, state_numel_) *
                  static_cast<int64_t>(master_.element_size());
  }
  return m;
}

absl::Status MixedPrecisionOptimizer::ZeroGrad() {
  // With forward_part the forward waits for the gathers part by part; the gradient buffer
  // this zeroes is not what they write. An overlapped update is waited for the same way: it
  // reads the per-parameter gradients this drops (which it holds, update_stream.h).
  if (gather_order_.empty()) MT_RETURN_IF_ERROR(WaitForGathers());
  torch::NoGradGuard no_grad;
  if (per_param_grads_) {
    ReleaseGrads();
  } else {
    SyncGradViews();
    model_grad_flat_.zero_();
  }
  // The master gradients are overwritten by the first fold (FoldIntoMaster), not zeroed: one
  // pass over them less per step.
  master_grad_holds_step_ = false;
  std::lock_guard<std::mutex> lock(hook_mu_);
  unfolded_ = true;
  armed_ = false;
  reduced_ = false;
  std::fill(bucket_folded_.begin(), bucket_folded_.end(), false);
  std::fill(bucket_started_.begin(), bucket_started_.end(), false);
  return absl::OkStatus();
}

void MixedPrecisionOptimizer::BeginMicroBatch(bool last, int chunk) {
  std::lock_guard<std::mutex> lock(hook_mu_);
  reduced_ = false;
  unfolded_ = true;
  std::fill(bucket_folded_.begin(), bucket_folded_.end(), false);
  if (!last || grad_accumulators_.empty()) return;
  if (!armed_) {
    // The first chunk armed this step: every bucket waits for all of its slots again.
    armed_ = true;
    std::fill(chunk_armed_.begin(), chunk_armed_.end(), false);
    std::fill(slot_ready_.begin(), slot_ready_.end(), false);
    std::fill(bucket_started_.begin(), bucket_started_.end(), false);
    for (size_t b = 0; b < bucket_slots_.size(); ++b) bucket_pending_[b] = bucket_slots_[b].size();
    next_bucket_ = 0;
    started_in_backward_ = 0;
  }
  if (chunk < 0) {
    std::fill(chunk_armed_.begin(), chunk_armed_.end(), true);
  } else if (static_cast<size_t>(chunk) < chunk_armed_.size()) {
    chunk_armed_[chunk] = true;
  }
}

void MixedPrecisionOptimizer::FinishMicroBatch() {
  if (!has_fp32_master_grads()) return;
  torch::NoGradGuard no_grad;
  SyncGradViews();
  std::lock_guard<std::mutex> lock(hook_mu_);
  // Fold the buckets no hook has folded, in runs of consecutive ones. A started bucket (its
  // reduction running on the master gradients) has all its gradients already: no backward of
  // this step writes to it any more.
  const auto& buckets = reducer_->buckets();
  auto done = [this](size_t i) { return bucket_folded_[i] || bucket_started_[i]; };
  size_t b = 0;
  while (b < buckets.size()) {
    if (done(b)) {
      ++b;
      continue;
    }
    size_t e = b;
    while (e < buckets.size() && !done(e)) bucket_folded_[e++] = true;
    FoldIntoMaster(buckets[b].begin, buckets[e - 1].end);
    b = e;
  }
  // What the next backward adds is new (folded by the next FinishMicroBatch, or by Step).
  std::fill(bucket_folded_.begin(), bucket_folded_.end(), false);
  master_grad_holds_step_ = true;
  unfolded_ = false;
}

void MixedPrecisionOptimizer::FoldIntoMaster(int64_t begin, int64_t end) {
  torch::Tensor master = master_grad_.narrow(0, begin, end - begin);
  torch::Tensor model = model_grad_flat_.narrow(0, begin, end - begin);
  if (master_grad_holds_step_) {
    master.add_(model);
  } else {
    master.copy_(model);
  }
  model.zero_();
}

void MixedPrecisionOptimizer::OnGradReady(size_t slot) {
  torch::NoGradGuard no_grad;
  std::lock_guard<std::mutex> lock(hook_mu_);
  // A late gradient is not final when backward is done with it: its bucket waits for
  // ReduceGradients.
  if (!armed_ || !chunk_armed_[slot_chunk_[slot]] || slot_ready_[slot] || slot_late_[slot]) return;
  slot_ready_[slot] = true;
  if (--bucket_pending_[slot_bucket_[slot]] > 0) return;
  // Buckets start in index order on every rank (c10d matches collectives by order).
  while (next_bucket_ < bucket_pending_.size() && bucket_pending_[next_bucket_] == 0) {
    StartBucket(next_bucket_++, /*fold=*/true);
    ++started_in_backward_;
  }
}

void MixedPrecisionOptimizer::StartBucket(size_t b, bool fold) {
  if (fold && has_fp32_master_grads() && !bucket_folded_[b]) {
    const auto& r = reducer_->buckets()[b];
    FoldIntoMaster(r.begin, r.end);
    bucket_folded_[b] = true;
  }
  bucket_started_[b] = true;
  reducer_->StartReduction(static_cast<int>(b), GradBuffer());
}

absl::Status MixedPrecisionOptimizer::ReduceGradients() {
  torch::NoGradGuard no_grad;
  {
    std::lock_guard<std::mutex> lock(hook_mu_);
    if (reduced_) return absl::OkStatus();
  }
  SyncGradViews();
  // The last backward's gradients, unless FinishMicroBatch has folded them.
  if (has_fp32_master_grads() && unfolded_) FinishMicroBatch();
  if (reducer_->active()) {
    std::lock_guard<std::mutex> lock(hook_mu_);
    if (!armed_) next_bucket_ = 0;
    armed_ = false;
    while (next_bucket_ < reducer_->buckets().size()) StartBucket(next_bucket_++, false);
  }
  MT_RETURN_IF_ERROR(reducer_->WaitReductions());
  std::lock_guard<std::mutex> lock(hook_mu_);
  reduced_ = true;
  std::fill(bucket_started_.begin(), bucket_started_.end(), false);  // none is running
  return absl::OkStatus();
}

absl::Status MixedPrecisionOptimizer::WaitForParameters() {
  if (update_stream_ != nullptr) update_stream_->WaitAll();
  return WaitForGathers();
}

absl::Status MixedPrecisionOptimizer::WaitForGathers() {
  gathers_waited_ = gather_order_.size();
  if (reducer_ == nullptr || !reducer_->gathers_pending()) return absl::OkStatus();
  return reducer_->WaitGathers();
}

absl::Status MixedPrecisionOptimizer::WaitForParametersOfPart(int64_t part) {
  if (update_stream_ != nullptr) update_stream_->WaitPart(part);
  if (reducer_ == nullptr || !reducer_->gathers_pending()) return absl::OkStatus();
  if (gather_order_.empty()) return WaitForParameters();
  // gather_order_ is sorted by first part: the buckets part `part` needs are a prefix.
  int waited = 0;
  while (gathers_waited_ < gather_order_.size() &&
         bucket_first_part_[gather_order_[gathers_waited_]] <= part) {
    MT_RETURN_IF_ERROR(reducer_->WaitGather(static_cast<int>(gather_order_[gathers_waited_])));
    ++gathers_waited_;
    ++waited;
  }
  if (waited > 0) {
    gather_waits_.push_back({part, waited, static_cast<int>(reducer_->num_gathers_pending())});
  }
  return absl::OkStatus();
}

void MixedPrecisionOptimizer::ReleaseGrads() {
  for (ParamSlot& slot : slots_) slot.param.mutable_grad().reset();
}

torch::Tensor MixedPrecisionOptimizer::GradView(const Segment& s) const {
  if (!per_param_grads_) return GradBuffer().narrow(0, s.flat_begin, s.numel);
  const ParamSlot& slot = slots_[s.slot];
  const torch::Tensor& g = slot.param.grad();
  // A parameter backward did not reach has no gradient: zeros, as in a buffer.
  if (!g.defined()) return torch::zeros({s.numel}, model_flat_.options());
  return g.reshape({-1}).narrow(0, s.flat_begin - slot.offset, s.numel);
}

void MixedPrecisionOptimizer::SyncGradViews() {
  if (per_param_grads_) return;
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

std::vector<kernels::GradPiece> MixedPrecisionOptimizer::NormPieces() const {
  std::vector<kernels::GradPiece> pieces;
  if (per_param_grads_) {
    for (const ParamSlot& slot : slots_) {
      const torch::Tensor& g = slot.param.grad();
      if (g.defined()) pieces.push_back({g.reshape({-1}), slot.counted_in_norm});
    }
    return pieces;
  }
  const torch::Tensor& g = GradBuffer();
  for (bool counted : {true, false}) {
    for (const auto& r : counted ? norm_ranges_ : excluded_ranges_) {
      pieces.push_back({g.narrow(0, r.first, r.second - r.first), counted});
    }
  }
  return pieces;
}

torch::Tensor MixedPrecisionOptimizer::LocalSumOfSquares() {
  const c10::ScalarType acc = master_.scalar_type();
  if (UsesFusedKernels()) {
    std::vector<kernels::GradPiece> pieces = NormPieces();
    if (kernels::GradSumOfSquaresSupports(pieces)) return kernels::GradSumOfSquares(pieces);
  }
  if (per_param_grads_) {
    // Each .grad in pieces of at most chunk_elements (as below: an upcast copy, where the
    // reduction makes one, stays chunk-sized).
    std::vector<torch::Tensor> counted, excluded;
    for (const ParamSlot& slot : slots_) {
      if (!slot.param.grad().defined()) continue;
      const torch::Tensor g = slot.param.grad().reshape({-1});
      for (int64_t b = 0; b < slot.numel; b += config_.chunk_elements) {
        const int64_t n = std::min(config_.chunk_elements, slot.numel - b);
        (slot.counted_in_norm ? counted : excluded).push_back(L2Norm(g.narrow(0, b, n), acc));
      }
    }
    auto sum = [&](const std::vector<torch::Tensor>& norms) {
      if (norms.empty()) return torch::zeros({1}, master_.options());
      return at::stack(norms).square().sum().reshape({1});
    };
    torch::Tensor sumsq = sum(counted);
    if (!excluded.empty()) sumsq = sumsq + sum(excluded) * 0.0;
    return sumsq;
  }
  const torch::Tensor& g = GradBuffer();
  auto sum_of = [&](const std::vector<std::pair<int64_t, int64_t>>& ranges) {
    std::vector<torch::Tensor> norms;
    for (const auto& r : ranges) {
      for (int64_t b = r.first; b < r.second; b += config_.chunk_elements) {
        const int64_t n = std::min(config_.chunk_elements, r.second - b);
        norms.push_back(L2Norm(g.narrow(0, b, n), acc));
      }
    }
    if (norms.empty()) return torch::zeros({1}, g.options().dtype(acc));
    return at::stack(norms).square().sum().reshape({1});
  };
  torch::Tensor sumsq = sum_of(norm_ranges_);
  // Left-out gradients add 0 * their sum of squares: nothing, unless it is inf or NaN.
  if (!excluded_ranges_.empty()) sumsq = sumsq + sum_of(excluded_ranges_) * 0.0;
  return sumsq;
}

absl::Status MixedPrecisionOptimizer::AllReduceSum(torch::Tensor& value) {
  const parallel::ProcessGroups* groups = parallel_.groups.get();
  if (groups == nullptr) return absl::OkStatus();
  std::vector<const parallel::GroupHandle*> over;
  // Distributed optimizer: each DP rank holds a different slice of the gradients.
  if (reducer_->shard()) over.push_back(&groups->dp());
  over.push_back(&groups->model_parallel());
  for (const parallel::GroupHandle* h : over) {
    if (!h->active()) continue;
    std::vector<at::Tensor> tensors = {value};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    parallel::CommStats::Span span =
        parallel::StartComm(*h, parallel::Collective::kAllReduce, value);
    MT_RETURN_IF_ERROR(
        parallel::Wait(h->group->allreduce(tensors, opts), "gradient norm over " + h->name));
    span.Finish();
  }
  return absl::OkStatus();
}

std::vector<std::vector<MixedPrecisionOptimizer::Piece>> MixedPrecisionOptimizer::Chunks(
    int64_t limit) const {
  std::vector<std::vector<Piece>> chunks(1);
  int64_t used = 0;
  for (const Segment& s : segments_) {
    int64_t done = 0;
    while (done < s.numel) {
      if (limit > 0 && used == limit) {
        chunks.emplace_back();
        used = 0;
      }
      const int64_t n = limit > 0 ? std::min(s.numel - done, limit - used) : s.numel - done;
      Piece p;
      p.segment = {s.flat_begin + done, s.local_begin + done, n, s.weight_decay, s.slot};
      p.temp_begin = used;
      chunks.back().push_back(p);
      used += n;
      done += n;
    }
  }
  return chunks;
}

void MixedPrecisionOptimizer::RestoreStepCount(int64_t steps) {
  if (update_stream_ != nullptr) update_stream_->WaitAll();  // the update reads Adam's t
  step_.fill_(static_cast<double>(steps));
}

void MixedPrecisionOptimizer::RunUpdateFences() {
  std::vector<std::function<void()>> fences = std::move(update_fences_);
  update_fences_.clear();
  for (const auto& fence : fences) fence();
}

absl::StatusOr<OptimizerStepResult> MixedPrecisionOptimizer::Step(double lr, double loss_scale) {
  torch::NoGradGuard no_grad;
  // The last step's parameter gathers and overlapped update are done (a no-op after a forward
  // that waited for them): the update writes into the same buffers.
  MT_RETURN_IF_ERROR(WaitForParameters());
  // 1. This step's gradients, summed over DP.
  MT_RETURN_IF_ERROR(ReduceGradients());
  // Loss scaling: unscale first, as Megatron does, because the squares of scaled gradients can
  // overflow fp32 (scales reach 2^32 and more); a pass over this rank's gradients, fp16 only in
  // practice. The DP sum's 1/dp is folded into the update instead (no pass).
  if (loss_scale != 1.0) {
    if (per_param_grads_) {
      for (ParamSlot& slot : slots_) {
        if (slot.param.grad().defined()) slot.param.mutable_grad().mul_(1.0 / loss_scale);
      }
    } else {
      for (const Segment& s : segments_) {
        GradBuffer().narrow(0, s.flat_begin, s.numel).mul_(1.0 / loss_scale);
      }
    }
  }
  const double divisor = reducer_->active() ? reducer_->dp_size() : 1;
  // 2. The global norm, on the device: an inf or NaN anywhere makes it inf or NaN.
  torch::Tensor sumsq = LocalSumOfSquares();
  MT_RETURN_IF_ERROR(AllReduceSum(sumsq));
  const torch::Tensor norm = (sumsq.sqrt() / divisor).reshape({});
  const torch::Tensor found_inf = torch::isfinite(norm).logical_not().to(torch::kFloat);
  // 3. The clip coefficient (Megatron: clip / (norm + 1e-6), applied when < 1).
  torch::Tensor coeff = torch::ones({}, norm.options());
  if (config_.clip_grad > 0.0) coeff = (config_.clip_grad / (norm + 1e-6)).clamp_max(1.0);
  // 4. Whatever still reads the state (an async checkpoint's copies) is done before it changes;
  //    Adam's t counts the steps taken.
  RunUpdateFences();
  step_.add_(1.0 - found_inf);
  // 5. The update (nothing changes when found_inf), then the model's copy (which the fused
  //    kernel writes in the same pass).
  bool model_written = false;
  if (config_.kind == OptimizerConfig::Kind::kAdamW) {
    model_written = KernelAdamWUpdate(lr, (divisor / coeff).to(torch::kFloat), found_inf);
    if (!model_written) AdamWUpdate(lr, coeff / divisor, found_inf);
  } else {
    SgdUpdate(lr, coeff / divisor, found_inf);
  }
  if (!master_is_model_ && !model_written) {
    if (!reducer_->shard()) {
      model_flat_.copy_(master_);  // one kernel (padding is zero in both)
    } else {
      for (const Segment& s : segments_) {
        model_flat_.narrow(0, s.flat_begin, s.numel).copy_(MasterView(s));
      }
    }
  }
  // Per-parameter gradients are dropped once read (PyTorch's zero_grad(set_to_none)): the
  // memory serves the next forward's activations.
  if (per_param_grads_) ReleaseGrads();
  // 6. Distributed optimizer: every rank's slices back into every rank's parameters.
  //    With forward_part in the order the forward needs them (file comment).
  if (reducer_->shard()) {
    last_gather_waits_ = std::move(gather_waits_);
    gather_waits_.clear();
    gathers_waited_ = 0;
    const size_t n = reducer_->buckets().size();
    for (size_t i = 0; i < n; ++i) {
      const size_t b = gather_order_.empty() ? i : gather_order_[i];
      reducer_->StartGather(static_cast<int>(b), model_flat_);
    }
    if (!parallel_.overlap_param_gather) MT_RETURN_IF_ERROR(WaitForParameters());
  }
  return OptimizerStepResult(norm, found_inf);
}

bool MixedPrecisionOptimizer::UsesFusedKernels() const {
  return config_.fused_adamw && kernels::FusedOptimizerKernelsBuilt() && master_.is_cuda() &&
         master_.scalar_type() == torch::kFloat;
}

bool MixedPrecisionOptimizer::KernelAdamWUpdate(double lr, const torch::Tensor& grad_divisor,
                                                const torch::Tensor& found_inf) {
  if (!UsesFusedKernels()) return false;
  kernels::AdamWState state;
  state.master = master_;
  state.exp_avg = exp_avg_;
  state.exp_avg_sq = exp_avg_sq_;
  state.master_is_model = master_is_model_;
  if (!master_is_model_) state.model = model_flat_;
  state.step = step_;
  state.grad_divisor = grad_divisor.reshape({});
  state.found_inf = found_inf.reshape({});
  std::vector<kernels::AdamWPiece> pieces;
  for (const Segment& s : segments_) {
    kernels::AdamWPiece p;
    // A parameter backward did not reach: the kernel reads zeros (GradView would allocate them).
    const bool no_grad = per_param_grads_ && !slots_[s.slot].param.grad().defined();
    if (!no_grad) p.grad = GradView(s);
    p.state_begin = s.local_begin;
    p.model_begin = s.flat_begin;
    p.numel = s.numel;
    p.weight_decay = s.weight_decay;
    pieces.push_back(std::move(p));
  }
  if (!kernels::FusedAdamWSupports(state, pieces)) return false;
  kernels::AdamWHyper hyper;
  hyper.lr = lr;
  hyper.beta1 = config_.adam_beta1;
  hyper.beta2 = config_.adam_beta2;
  hyper.eps = config_.adam_eps;
  hyper.weight_decay = config_.weight_decay;
  if (update_stream_ == nullptr) {
    kernels::FusedAdamW(state, pieces, hyper);
    return true;
  }
  // overlap_update: one launch per forward part, in order, on the update stream. What it reads
  // from this step's allocations (the gradients Step drops next, the scalars) is held for it.
  std::vector<std::vector<kernels::AdamWPiece>> by_part(update_stream_->parts());
  std::vector<torch::Tensor> hold = {state.grad_divisor, state.found_inf};
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].grad.defined()) hold.push_back(pieces[i].grad);
    by_part[segment_part_[i]].push_back(std::move(pieces[i]));
  }
  update_stream_->Run(
      [&](int64_t part) {
        if (!by_part[part].empty()) kernels::FusedAdamW(state, by_part[part], hyper);
      },
      hold);
  return true;
}

void MixedPrecisionOptimizer::AdamWUpdate(double lr, const torch::Tensor& scale,
                                          const torch::Tensor& found_inf) {
  // Element-wise, with every step-dependent factor a device scalar: on a skipped step the
  // gradients become 0 and every factor the identity, so nothing changes, bit for bit.
  // The factors are computed in fp64 (as LibTorch's AdamW does on the host), then rounded once.
  const c10::ScalarType dt = master_.scalar_type();
  const torch::Tensor skip = found_inf.to(torch::kBool);
  const torch::Tensor keep = (1.0 - found_inf).to(torch::kDouble);
  const torch::Tensor grad_scale = torch::where(skip, torch::zeros_like(scale), scale).to(dt);
  const torch::Tensor t = step_.to(torch::kDouble).clamp_min(1.0);
  const double b1 = config_.adam_beta1, b2 = config_.adam_beta2;
  const torch::Tensor neg_step_size = (-lr * keep / (1.0 - at::pow(b1, t))).to(dt);
  const torch::Tensor sqrt_bc2 = (1.0 - at::pow(b2, t)).sqrt().to(dt);
  const torch::Tensor b1_now = torch::where(skip, torch::ones_like(keep), keep * b1).to(dt);
  const torch::Tensor b2_now = torch::where(skip, torch::ones_like(keep), keep * b2).to(dt);
  const torch::Tensor decay = (1.0 - lr * config_.weight_decay * keep).to(dt);
  auto update = [&](const Segment& s, torch::Tensor& g) {
    torch::Tensor m = exp_avg_.narrow(0, s.local_begin, s.numel);
    torch::Tensor v = exp_avg_sq_.narrow(0, s.local_begin, s.numel);
    torch::Tensor w = MasterView(s);
    m.mul_(b1_now).add_(g, 1.0 - b1);
    v.mul_(b2_now).addcmul_(g, g, 1.0 - b2);
    if (s.weight_decay && config_.weight_decay > 0.0) w.mul_(decay);
    at::sqrt_out(g, v);
    g.div_(sqrt_bc2).add_(config_.adam_eps);
    // (-step_size * m) / denom, rounded as LibTorch's addcdiv_(m, denom, -step_size) rounds it
    // (a piece-sized temporary, the fallback's only one besides the conversion chunk).
    w.addcdiv_(m * neg_step_size, g);
  };
  ForEachUnscaledGradient(config_.chunk_elements, grad_scale, update);
}

void MixedPrecisionOptimizer::ForEachUnscaledGradient(
    int64_t limit, const torch::Tensor& grad_scale,
    const std::function<void(const Segment&, torch::Tensor&)>& update) {
  torch::Tensor temp;
  if (needs_conversion_) temp = torch::empty({std::min(limit, state_numel_)}, master_.options());
  for (const std::vector<Piece>& chunk : Chunks(limit)) {
    for (const Piece& p : chunk) {
      const Segment& s = p.segment;
      torch::Tensor g = GradView(s);
      if (needs_conversion_) g = temp.narrow(0, p.temp_begin, s.numel).copy_(g);
      g.mul_(grad_scale).nan_to_num_(0.0, 0.0, 0.0);
      update(s, g);
    }
  }
}

void MixedPrecisionOptimizer::SgdUpdate(double lr, const torch::Tensor& scale,
                                        const torch::Tensor& found_inf) {
  const c10::ScalarType dt = master_.scalar_type();
  const torch::Tensor skip = found_inf.to(torch::kBool);
  const torch::Tensor keep = (1.0 - found_inf).to(torch::kDouble);
  const torch::Tensor grad_scale = torch::where(skip, torch::zeros_like(scale), scale).to(dt);
  const torch::Tensor neg_lr = (-lr * keep).to(dt);
  const torch::Tensor decay = (config_.weight_decay * keep).to(dt);
  // The momentum buffer starts as the first gradient (t == 1 after this step's increment).
  const torch::Tensor first = step_ == 1.0;
  const torch::Tensor mu = torch::where(skip, torch::ones_like(keep),
                                        torch::where(first, torch::zeros_like(keep),
                                                     torch::full_like(keep, config_.sgd_momentum)))
                               .to(dt);
  const int64_t limit = needs_conversion_ ? config_.chunk_elements : 0;
  ForEachUnscaledGradient(limit, grad_scale, [&](const Segment& s, torch::Tensor& g) {
    torch::Tensor w = MasterView(s);
    if (s.weight_decay && config_.weight_decay > 0.0) g.addcmul_(w, decay);
    if (momentum_.defined()) {
      torch::Tensor buf = momentum_.narrow(0, s.local_begin, s.numel);
      buf.mul_(mu).add_(g);
      w.addcmul_(buf, neg_lr);
    } else {
      w.addcmul_(g, neg_lr);
    }
  });
}

}  // namespace mt::engine
