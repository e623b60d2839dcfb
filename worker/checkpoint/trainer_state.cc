#include "worker/checkpoint/trainer_state.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "worker/engine/optimizer.h"
#include "worker/model/generator_state.h"
#include "worker/model/gpt.h"
#include "worker/model/sharding.h"
#include "worker/parallel/process_groups.h"

namespace mt::checkpoint {
namespace {

bool MasterIsModel(const engine::MixedPrecisionOptimizer& opt) {
  return opt.master_params().is_same(opt.model_params());
}

// The optimizer's flat state buffers by state name (undefined ones skipped; the master
// weights only when they are not the model's own).
std::vector<std::pair<std::string, torch::Tensor>> StateBuffers(
    const engine::MixedPrecisionOptimizer& opt) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (!MasterIsModel(opt)) out.emplace_back("master", opt.master_params());
  if (opt.exp_avg().defined()) out.emplace_back("exp_avg", opt.exp_avg());
  if (opt.exp_avg_sq().defined()) out.emplace_back("exp_avg_sq", opt.exp_avg_sq());
  if (opt.momentum().defined()) out.emplace_back("momentum", opt.momentum());
  return out;
}

// A state buffer of this rank in flat offsets (those of the model buffer, ParamSlot::offset).
// Without the distributed optimizer that is the buffer itself. With it, every DP rank holds
// only its segments: each rank places them into a zero buffer of the model's size and the DP
// group sums these onto its first rank (DP coordinate 0, the one that writes). Every element
// is held by exactly one rank, so summed as integers of the element's width the result is the
// holder's bits, exactly (a float sum would turn -0.0 into +0.0). Every DP rank must call it;
// on the others the result is undefined.
absl::StatusOr<torch::Tensor> FlatState(const engine::MixedPrecisionOptimizer& opt,
                                        const torch::Tensor& local) {
  if (!opt.distributed()) return local;
  torch::NoGradGuard no_grad;
  torch::Tensor flat = torch::zeros({opt.model_params().numel()}, local.options());
  for (const auto& s : opt.segments()) {
    flat.narrow(0, s.flat_begin, s.numel).copy_(local.narrow(0, s.local_begin, s.numel));
  }
  std::vector<torch::Tensor> bits = {
      flat.view(flat.element_size() == 8 ? torch::kLong : torch::kInt)};
  c10d::ReduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  options.rootRank = 0;
  const parallel::GroupHandle& dp = opt.parallel_config().groups->dp();
  MT_RETURN_IF_ERROR(parallel::Wait(dp.group->reduce(bits, options),
                                    "gathering the distributed optimizer's state over " + dp.name));
  if (dp.rank != 0) return torch::Tensor();
  return flat;
}

// Copies one parameter's state `param_state` (any shape, numel = slot.numel, any device and
// float dtype) into this rank's part of the state buffer `local`: all of it without the
// distributed optimizer, the pieces inside this rank's segments with it.
void ScatterState(const engine::MixedPrecisionOptimizer& opt,
                  const engine::MixedPrecisionOptimizer::ParamSlot& slot,
                  const torch::Tensor& param_state, torch::Tensor local, bool non_blocking) {
  torch::NoGradGuard no_grad;
  const torch::Tensor flat = param_state.reshape({-1});
  if (!opt.distributed()) {
    local.narrow(0, slot.offset, slot.numel).copy_(flat, non_blocking);
    return;
  }
  const int64_t slot_end = slot.offset + slot.numel;
  for (const auto& s : opt.segments()) {
    const int64_t begin = std::max(s.flat_begin, slot.offset);
    const int64_t end = std::min(s.flat_begin + s.numel, slot_end);
    if (begin >= end) continue;
    local.narrow(0, s.local_begin + (begin - s.flat_begin), end - begin)
        .copy_(flat.narrow(0, begin - slot.offset, end - begin), non_blocking);
  }
}

// The optimizer's kind as the manifest's TrainerState.optimizer names it.
const char* OptimizerKind(const engine::MixedPrecisionOptimizer& opt) {
  return opt.config().kind == engine::OptimizerConfig::Kind::kAdamW ? "adamw" : "sgd";
}

// The parameters this rank holds (Trainer::Parameters: every chunk of an interleaved pipeline
// stage, whose model() is its first chunk only) in the model's registration order (the
// embedding first), the other chunks' after.
std::vector<std::pair<std::string, torch::Tensor>> ModelOrder(engine::Trainer& trainer) {
  const std::vector<std::pair<std::string, torch::Tensor>> params = trainer.Parameters();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].first] = i;
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::vector<bool> taken(params.size(), false);
  for (const auto& item : trainer.model().named_parameters()) {
    auto it = index.find(item.key());
    if (it == index.end() || taken[it->second]) continue;
    taken[it->second] = true;
    out.push_back(params[it->second]);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!taken[i]) out.push_back(params[i]);
  }
  return out;
}

// The checkpoint's tensor `name` for a destination of `like`'s shape (this rank's slice),
// as a tensor to copy from, without copying it first: a view of the staged device copy of its
// file, else of the verified bytes in memory, else a host tensor the source assembles
// (resharding; its bytes kept in `hold`). Errors: NOT_FOUND (no such tensor), a shape that
// does not fit (naming the tensor).
class SourceReader {
 public:
  SourceReader(TensorSource& source, const RestoreOptions& options)
      : source_(source), options_(options) {
    if (auto* s = dynamic_cast<StagedSource*>(&source)) staged_ = &s->staged();
  }

  absl::StatusOr<torch::Tensor> Get(const std::string& name, int split, const torch::Tensor& like,
                                    std::deque<HostTensor>& hold) {
    SliceRequest req;
    req.split_dim = split;
    req.tp_rank = options_.tp_rank;
    req.tp_size = options_.tp_size;
    req.shape = like.sizes().vec();
    MT_ASSIGN_OR_RETURN(std::optional<StoredTensor> stored, source_.Locate(name, req));
    if (stored.has_value() && stored->shape == req.shape) {
      MT_ASSIGN_OR_RETURN(c10::ScalarType type, ToScalarType(stored->dtype));
      const int64_t size = static_cast<int64_t>(DTypeSize(stored->dtype));
      torch::Tensor file = staged_ != nullptr ? staged_->Find(stored->file) : torch::Tensor();
      // A device copy when the element is aligned there (a kernel converting the dtype reads
      // whole elements; the same dtype is a plain memcpy either way).
      if (file.defined() && file.device() == like.device() &&
          static_cast<int64_t>(stored->offset + stored->nbytes) <= file.numel() &&
          (type == like.scalar_type() || stored->offset % size == 0)) {
        ++staged_copies_;
        return torch::from_blob(file.data_ptr<uint8_t>() + stored->offset, req.shape,
                                torch::TensorOptions().dtype(type).device(file.device()));
      }
      ++memory_copies_;
      return torch::from_blob(const_cast<char*>(stored->data), req.shape,
                              torch::TensorOptions().dtype(type));
    }
    MT_ASSIGN_OR_RETURN(HostTensor t, source_.Slice(name, req));
    if (t.shape != req.shape) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": the checkpoint gives ",
                                                     ShapeString(t.shape), ", the model has ",
                                                     ShapeString(req.shape)));
    }
    MT_ASSIGN_OR_RETURN(c10::ScalarType type, ToScalarType(t.dtype));
    hold.push_back(std::move(t));
    ++assembled_copies_;
    return torch::from_blob(hold.back().data.data(), req.shape, torch::TensorOptions().dtype(type));
  }

  int staged_copies() const { return staged_copies_; }
  int memory_copies() const { return memory_copies_; }
  int assembled_copies() const { return assembled_copies_; }

 private:
  TensorSource& source_;
  const RestoreOptions& options_;
  const StagedFiles* staged_ = nullptr;
  int staged_copies_ = 0;
  int memory_copies_ = 0;
  int assembled_copies_ = 0;
};

// Copies `src` into `dst` (a device-to-device copy is only queued; host sources are copied
// before this returns, since their memory may go away).
void CopyTo(torch::Tensor dst, const torch::Tensor& src) {
  torch::NoGradGuard no_grad;
  dst.copy_(src, /*non_blocking=*/src.device() == dst.device() && src.is_cuda());
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

absl::StatusOr<std::vector<StateTensor>> CollectTensors(engine::Trainer& trainer) {
  try {
    if (!trainer.has_optimizer()) {
      return absl::FailedPreconditionError(
          "a trainer built for evaluation only has no training state to save");
    }
    std::vector<StateTensor> out;
    engine::MixedPrecisionOptimizer& opt = trainer.optimizer();
    // The parameters the optimizer updates, under the whole model's names.
    MT_RETURN_IF_ERROR(opt.WaitForParameters());
    for (const auto& [name, param] : ModelOrder(trainer)) {
      out.push_back({"model." + name, param.detach(), model::TensorParallelSplitDim(name)});
    }
    std::vector<std::pair<std::string, torch::Tensor>> flat;
    for (const auto& [state, local] : StateBuffers(opt)) {
      MT_ASSIGN_OR_RETURN(torch::Tensor f, FlatState(opt, local));
      flat.emplace_back(state, std::move(f));
    }
    const bool holds_state = flat.empty() || flat[0].second.defined();
    for (const auto& slot : opt.slots()) {
      for (const auto& [state, f] : flat) {
        if (!holds_state) break;
        out.push_back({absl::StrCat("optimizer.", state, ".", slot.name),
                       f.narrow(0, slot.offset, slot.numel).view(slot.param.sizes()),
                       model::TensorParallelSplitDim(slot.name)});
      }
    }
    out.push_back({"rng.cpu", model::GeneratorState(c10::Device(c10::kCPU)), -1});
    return out;
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("collecting the checkpoint's tensors: ", e.what_without_backtrace()));
  }
}

mt::v1::TrainerState CollectScalars(engine::Trainer& trainer) {
  mt::v1::TrainerState s;
  s.set_iteration(trainer.iteration());
  s.set_consumed_samples(trainer.consumed_samples());
  s.set_skipped_iterations(trainer.skipped_iterations());
  if (trainer.has_optimizer()) {
    s.set_optimizer_steps(trainer.optimizer().step_count());
    s.set_optimizer(OptimizerKind(trainer.optimizer()));
  }
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

torch::Tensor StagedFiles::Find(const std::string& file) const {
  auto it = files_.find(file);
  return it == files_.end() ? torch::Tensor() : it->second;
}

int64_t StagedFiles::bytes() const {
  int64_t total = 0;
  for (const auto& [_, t] : files_) total += t.numel();
  return total;
}

namespace {

// RestoreTrainer's step 2, for a trainer with an optimizer: the checkpoint's optimizer kind
// checked against it, then its master weights and state from `reader` (the state zeros with
// `weights_only` or without options.load_optimizer).
absl::Status RestoreOptimizerState(engine::MixedPrecisionOptimizer& opt,
                                   const mt::v1::CheckpointManifest& manifest, SourceReader& reader,
                                   bool weights_only, const RestoreOptions& options,
                                   std::deque<HostTensor>& hold) {
  if (!weights_only && options.load_optimizer) {
    const std::string kind = OptimizerKind(opt);
    const std::string& saved = manifest.trainer().optimizer();
    if (!saved.empty() && saved != kind) {
      return absl::FailedPreconditionError(
          absl::StrCat("the checkpoint's optimizer is ", saved, ", the spec's ", kind,
                       "; load with --no-load-optim to start the optimizer afresh"));
    }
  }
  // 2. Master weights and optimizer state, parameter by parameter, whatever layout and
  // optimizer wrote them: each parameter's whole (TP-sliced) state is read, and this rank
  // keeps the part it holds (ScatterState; with the distributed optimizer its segments),
  // copied there straight from the checkpoint's bytes.
  for (const auto& slot : opt.slots()) {
    const int split = model::TensorParallelSplitDim(slot.name);
    for (const auto& [state, local] : StateBuffers(opt)) {
      const std::string name = absl::StrCat("optimizer.", state, ".", slot.name);
      torch::Tensor value;
      if (state == "master") {
        // The checkpoint's master weights (the tied embedding's for the last stage's copy,
        // as Slice finds them), else its weights (an fp32 checkpoint's are exactly its
        // master weights; a 16-bit one's are what there is).
        absl::StatusOr<torch::Tensor> t = reader.Get(name, split, slot.param, hold);
        if (absl::IsNotFound(t.status())) {
          t = reader.Get("model." + slot.name, split, slot.param, hold);
        }
        if (!t.ok()) return t.status();
        value = *std::move(t);
      } else if (!weights_only && options.load_optimizer) {
        MT_ASSIGN_OR_RETURN(value, reader.Get(name, split, slot.param, hold));
      } else {
        value = torch::zeros(slot.param.sizes(), local.options());
      }
      ScatterState(opt, slot, value, local,
                   /*non_blocking=*/value.is_cuda() && value.device() == local.device());
      hold.clear();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RestoreTrainer(engine::Trainer& trainer, TensorSource& source,
                            const RestoreOptions& options) {
  bool on_gpu = false;
  try {
    const mt::v1::CheckpointManifest& manifest = source.manifest();
    // A trainer built for evaluation only holds the weights alone.
    const bool weights_only =
        options.weights_only || !manifest.has_trainer() || !trainer.has_optimizer();
    SourceReader reader(source, options);
    // Host tensors assembled for this restore (resharding); kept until the copies are done.
    std::deque<HostTensor> hold;  // a deque: elements stay in place
    // 1. Weights (the model's dtype as stored; copy_ converts), every parameter the optimizer
    // updates (all chunks of an interleaved pipeline stage).
    if (trainer.has_optimizer()) {
      MT_RETURN_IF_ERROR(trainer.optimizer().WaitForParameters());
      // An async save's copies of the state are done before it changes.
      trainer.optimizer().RunUpdateFences();
    }
    torch::NoGradGuard no_grad;
    for (const auto& [param_name, param] : ModelOrder(trainer)) {
      const std::string name = "model." + param_name;
      on_gpu = on_gpu || param.is_cuda();
      MT_ASSIGN_OR_RETURN(torch::Tensor src,
                          reader.Get(name, model::TensorParallelSplitDim(param_name), param, hold));
      CopyTo(param, src);
      hold.clear();
    }
    if (trainer.has_optimizer()) {
      MT_RETURN_IF_ERROR(RestoreOptimizerState(trainer.optimizer(), manifest, reader, weights_only,
                                               options, hold));
    }
    // Every queued copy done before the staged copies may be freed and training runs on other
    // streams.
    if (on_gpu) torch::cuda::synchronize();
    if (options.stats != nullptr) {
      options.stats->from_staged = reader.staged_copies();
      options.stats->from_memory = reader.memory_copies();
      options.stats->from_assembled = reader.assembled_copies();
    }
    MT_LOG(INFO) << "checkpoint restore: " << reader.staged_copies()
                 << " tensors from the device copy of the files, " << reader.memory_copies()
                 << " from the verified bytes in memory, " << reader.assembled_copies()
                 << " assembled (resharding or files not kept)";
    // 3. Counters, loss scale, Adam's t, the generator.
    if (weights_only) {
      if (trainer.has_optimizer()) trainer.optimizer().RestoreStepCount(0);
      return trainer.RestoreProgress(0, 0, 0, 0);
    }
    // Here the trainer has an optimizer (weights_only is set where it has none).
    engine::MixedPrecisionOptimizer& opt = trainer.optimizer();
    const mt::v1::TrainerState& s = manifest.trainer();
    if (options.load_optimizer) {
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
      model::SetGeneratorState(c10::Device(c10::kCPU), state);
    }
    return trainer.RestoreProgress(s.iteration(), s.consumed_samples(), s.skipped_iterations(),
                                   s.valid_consumed_samples());
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("restoring the checkpoint: ", e.what_without_backtrace()));
  }
}

}  // namespace mt::checkpoint
