#include "worker/checkpoint/trainer_state.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "worker/engine/optimizer.h"
#include "worker/model/gpt.h"
#include "worker/model/sharding.h"

namespace mt::checkpoint {
namespace {

int SplitOf(const std::string& param) {
  switch (model::TensorParallelSplit(param)) {
    case model::TpSplit::kDim0:
      return 0;
    case model::TpSplit::kDim1:
      return 1;
    default:
      return -1;
  }
}

// The three flat optimizer buffers by state name (undefined ones skipped).
std::vector<std::pair<std::string, torch::Tensor>> OptimizerBuffers(
    const engine::MixedPrecisionOptimizer& opt) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (opt.exp_avg().defined()) out.emplace_back("exp_avg", opt.exp_avg());
  if (opt.exp_avg_sq().defined()) out.emplace_back("exp_avg_sq", opt.exp_avg_sq());
  if (opt.momentum().defined()) out.emplace_back("momentum", opt.momentum());
  return out;
}

bool MasterIsModel(const engine::MixedPrecisionOptimizer& opt,
                   const engine::MixedPrecisionOptimizer::ParamSlot& slot) {
  return opt.MasterParam(slot).data_ptr() == slot.param.data_ptr();
}

absl::Status CopyInto(const HostTensor& src, torch::Tensor dst, const std::string& name) {
  MT_ASSIGN_OR_RETURN(c10::ScalarType type, ToScalarType(src.dtype));
  if (static_cast<int64_t>(src.shape.size()) != dst.dim() ||
      !std::equal(src.shape.begin(), src.shape.end(), dst.sizes().begin())) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": the checkpoint gives ",
                                                   ShapeString(src.shape), ", the model has ",
                                                   ShapeString(dst.sizes().vec())));
  }
  torch::NoGradGuard no_grad;
  torch::Tensor host = torch::from_blob(const_cast<char*>(src.data.data()), dst.sizes(),
                                        torch::TensorOptions().dtype(type));
  dst.copy_(host);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DType> ToDType(c10::ScalarType type) {
  switch (type) {
    case torch::kFloat:
      return DType::kF32;
    case torch::kHalf:
      return DType::kF16;
    case torch::kBFloat16:
      return DType::kBF16;
    case torch::kDouble:
      return DType::kF64;
    case torch::kLong:
      return DType::kI64;
    case torch::kInt:
      return DType::kI32;
    case torch::kByte:
      return DType::kU8;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("no checkpoint dtype for ", c10::toString(type)));
  }
}

absl::StatusOr<c10::ScalarType> ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return torch::kFloat;
    case DType::kF16:
      return torch::kHalf;
    case DType::kBF16:
      return torch::kBFloat16;
    case DType::kF64:
      return torch::kDouble;
    case DType::kI64:
      return torch::kLong;
    case DType::kI32:
      return torch::kInt;
    case DType::kU8:
      return torch::kByte;
  }
  return absl::InvalidArgumentError("unknown dtype");
}

std::vector<StateTensor> CollectTensors(engine::Trainer& trainer) {
  std::vector<StateTensor> out;
  for (const auto& item : trainer.model().named_parameters()) {
    out.push_back({"model." + item.key(), item.value().detach(), SplitOf(item.key())});
  }
  const engine::MixedPrecisionOptimizer& opt = trainer.optimizer();
  const auto buffers = OptimizerBuffers(opt);
  for (const auto& slot : opt.slots()) {
    const int split = SplitOf(slot.name);
    if (!MasterIsModel(opt, slot)) {
      out.push_back({"optimizer.master." + slot.name, opt.MasterParam(slot), split});
    }
    for (const auto& [state, flat] : buffers) {
      out.push_back({absl::StrCat("optimizer.", state, ".", slot.name),
                     flat.narrow(0, slot.offset, slot.numel).view(slot.param.sizes()), split});
    }
  }
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    out.push_back({"rng.cpu", gen.get_state(), -1});
  }
  return out;
}

mt::v1::TrainerState CollectScalars(engine::Trainer& trainer) {
  mt::v1::TrainerState s;
  s.set_iteration(trainer.iteration());
  s.set_consumed_samples(trainer.consumed_samples());
  s.set_skipped_iterations(trainer.skipped_iterations());
  s.set_optimizer_steps(trainer.optimizer().step_count());
  s.set_optimizer(
      trainer.optimizer().config().kind == engine::OptimizerConfig::Kind::kAdamW ? "adamw" : "sgd");
  s.mutable_loss_scaler()->set_scale(trainer.loss_scaler().scale());
  s.mutable_loss_scaler()->set_growth_tracker(trainer.loss_scaler().growth_tracker());
  s.mutable_loss_scaler()->set_hysteresis_tracker(trainer.loss_scaler().hysteresis_tracker());
  s.set_learning_rate(trainer.lr_schedule().LearningRate(
      std::max<int64_t>(0, trainer.consumed_samples() - trainer.plan().global_batch_size)));
  s.set_seed(trainer.plan().seed);
  s.set_valid_consumed_samples(trainer.valid_consumed_samples());
  return s;
}

mt::v1::ManifestModel DescribeModel(engine::Trainer& trainer) {
  const model::GptConfig& c = trainer.model().config();
  mt::v1::ManifestModel m;
  m.set_num_layers(c.num_layers);
  m.set_hidden_size(c.hidden_size);
  m.set_num_attention_heads(c.num_attention_heads);
  m.set_ffn_hidden_size(c.ffn_size());
  m.set_kv_channels(c.head_dim());
  m.set_max_position_embeddings(c.max_positions());
  m.set_vocab_size(c.vocab_size);
  m.set_padded_vocab_size(c.padded_vocab_size());
  m.set_untie_embeddings_and_output_weights(c.untie_embeddings_and_output_weights);
  m.set_layernorm_epsilon(c.layernorm_epsilon);
  return m;
}

absl::Status RestoreTrainer(engine::Trainer& trainer, TensorSource& source,
                            const RestoreOptions& options) {
  try {
    const mt::v1::CheckpointManifest& manifest = source.manifest();
    const bool weights_only = options.weights_only || !manifest.has_trainer();
    auto slice_for = [&](const std::string& name, int split,
                         const torch::Tensor& like) -> absl::StatusOr<HostTensor> {
      SliceRequest req;
      req.split_dim = split;
      req.tp_rank = options.tp_rank;
      req.tp_size = options.tp_size;
      req.shape = like.sizes().vec();
      return source.Slice(name, req);
    };
    // 1. Weights (the model's dtype as stored; copy_ converts).
    for (const auto& item : trainer.model().named_parameters()) {
      const std::string name = "model." + item.key();
      MT_ASSIGN_OR_RETURN(HostTensor t, slice_for(name, SplitOf(item.key()), item.value()));
      MT_RETURN_IF_ERROR(CopyInto(t, item.value(), name));
    }
    // 2. Master weights and optimizer state, parameter by parameter.
    engine::MixedPrecisionOptimizer& opt = trainer.optimizer();
    const auto buffers = OptimizerBuffers(opt);
    for (const auto& slot : opt.slots()) {
      const int split = SplitOf(slot.name);
      if (!MasterIsModel(opt, slot)) {
        const std::string master = "optimizer.master." + slot.name;
        torch::Tensor dst = opt.MasterParam(slot);
        if (source.Has(master)) {
          MT_ASSIGN_OR_RETURN(HostTensor t, slice_for(master, split, dst));
          MT_RETURN_IF_ERROR(CopyInto(t, dst, master));
        } else {
          torch::NoGradGuard no_grad;
          dst.copy_(slot.param);
        }
      }
      for (const auto& [state, flat] : buffers) {
        torch::Tensor dst = flat.narrow(0, slot.offset, slot.numel).view(slot.param.sizes());
        const std::string name = absl::StrCat("optimizer.", state, ".", slot.name);
        if (weights_only || !options.load_optimizer) {
          torch::NoGradGuard no_grad;
          dst.zero_();
          continue;
        }
        MT_ASSIGN_OR_RETURN(HostTensor t, slice_for(name, split, dst));
        MT_RETURN_IF_ERROR(CopyInto(t, dst, name));
      }
    }
    // 3. Counters, loss scale, Adam's t, the generator.
    if (weights_only) {
      opt.RestoreStepCount(0);
      return trainer.RestoreProgress(0, 0, 0, 0);
    }
    const mt::v1::TrainerState& s = manifest.trainer();
    if (options.load_optimizer) {
      const std::string kind =
          opt.config().kind == engine::OptimizerConfig::Kind::kAdamW ? "adamw" : "sgd";
      if (!s.optimizer().empty() && s.optimizer() != kind) {
        return absl::FailedPreconditionError(
            absl::StrCat("the checkpoint's optimizer is ", s.optimizer(), ", the spec's ", kind,
                         "; load with --no-load-optim to start the optimizer afresh"));
      }
      opt.RestoreStepCount(s.optimizer_steps());
      trainer.mutable_loss_scaler().Restore(s.loss_scaler().scale(),
                                            s.loss_scaler().growth_tracker(),
                                            s.loss_scaler().hysteresis_tracker());
    } else {
      opt.RestoreStepCount(0);
    }
    if (options.load_rng && source.Has("rng.cpu")) {
      MT_ASSIGN_OR_RETURN(HostTensor t, source.Full("rng.cpu"));
      torch::Tensor state = torch::empty({static_cast<int64_t>(t.data.size())}, torch::kByte);
      std::memcpy(state.data_ptr(), t.data.data(), t.data.size());
      at::Generator gen = at::detail::getDefaultCPUGenerator();  // shares the default's state
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    }
    return trainer.RestoreProgress(s.iteration(), s.consumed_samples(), s.skipped_iterations(),
                                   s.valid_consumed_samples());
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("restoring the checkpoint: ", e.what_without_backtrace()));
  }
}

}  // namespace mt::checkpoint
