#include "worker/engine/trainer.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/utils.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/durations.h"
#include "common/base/logging.h"
#include "common/base/rng.h"
#include "common/base/status_macros.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/resolved_spec.h"
#include "worker/engine/step_graph.h"
#include "worker/kernels/gemm_tuning.h"
#include "worker/model/gpt.h"
#include "worker/model/gpt_config.h"
#include "worker/parallel/collectives.h"
#include "worker/parallel/pipeline.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/tensor_parallel.h"

#if defined(MT_ENGINE_WITH_CUDA) && MT_ENGINE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace mt::engine {
namespace {

using Clock = std::chrono::steady_clock;

// The RNG seed of one step: a function of (seed, iteration) only, so a run's dropout masks do
// not depend on what ran before (evaluation, a restart from a checkpoint).
uint64_t StepSeed(uint64_t seed, int64_t iteration) {
  return SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(iteration) + 1));
}

// LibTorch's exceptions end here (DESIGN.md §8.1).
absl::Status FromException(const std::exception& e, absl::string_view what) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory: ", e.what()));
  }
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return absl::InternalError(absl::StrCat(what, ": ", c10_error->what_without_backtrace()));
  }
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}

template <typename F>
auto CatchTorch(absl::string_view what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return FromException(e, what);
  }
}

absl::StatusOr<torch::Device> ParseDevice(const std::string& name) {
  absl::StatusOr<torch::Device> parsed =
      CatchTorch("device", [&]() -> absl::StatusOr<torch::Device> { return torch::Device(name); });
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", name, "\" is not cpu, cuda or cuda:N"));
  }
  torch::Device d = *parsed;
  if (d.is_cpu()) return torch::Device(torch::kCPU);
  if (!d.is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat("device \"", name, "\": only cpu and cuda"));
  }
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        absl::StrCat("device \"", name, "\": this LibTorch/machine has no CUDA device"));
  }
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  const int64_t index = d.has_index() ? d.index() : 0;
  if (index >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("device \"", name, "\": only ", count, " CUDA devices"));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

absl::StatusOr<model::AttentionBackend> ParseBackend(const std::string& name) {
  if (name == "auto" || name.empty()) return model::AttentionBackend::kAuto;
  if (name == "math") return model::AttentionBackend::kMath;
  if (name == "fused") return model::AttentionBackend::kFused;
  if (name == "cudnn") return model::AttentionBackend::kCudnn;
  if (name == "flash") return model::AttentionBackend::kFlash;
  return absl::InvalidArgumentError(
      absl::StrCat("attention backend \"", name, "\" is not auto, math, fused, cudnn or flash"));
}

absl::StatusOr<kernels::MlpGelu> ParseMlpGelu(const std::string& name) {
  if (name == "auto" || name.empty()) return kernels::MlpGelu::kAuto;
  if (name == "epilogue") return kernels::MlpGelu::kEpilogue;
  if (name == "kernel") return kernels::MlpGelu::kKernel;
  return absl::InvalidArgumentError(
      absl::StrCat("mlp_gelu \"", name, "\" is not auto, epilogue or kernel"));
}

// This trainer runs tensor, pipeline and data parallelism (not context parallelism): the
// tensor-parallel shard and the pipeline stages over `groups` (a job's ranks), data
// parallelism with collectives and the optimizer's DP group.
absl::Status CheckParallelism(const mt::v1::ParallelSpec& p, int dp_size, int tp_size,
                              int pp_size) {
  auto over_one = [](int64_t v) { return v > 1; };
  if (over_one(p.context_parallel_size())) {
    return absl::UnimplementedError(absl::StrCat(
        "context parallelism is not available yet: this spec has cp=", p.context_parallel_size(),
        "; run it with cp=1"));
  }
  const int64_t tp = std::max<int64_t>(1, p.tensor_model_parallel_size());
  if (tp != tp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the spec asks for tp=", tp, " but this trainer's tensor-parallel group has ",
                     tp_size, " rank(s); run it as a job (mtctl submit) for tp > 1"));
  }
  const int64_t pp = std::max<int64_t>(1, p.pipeline_model_parallel_size());
  if (pp != pp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the spec asks for pp=", pp, " but this trainer's groups have ", pp_size,
                     " pipeline stage(s); run it as a job (mtctl submit) for pp > 1"));
  }
  int64_t dp = p.data_parallel_size();
  if (dp <= 0 && p.world_size() > 0) dp = p.world_size() / (tp * pp);  // dp "auto"
  if (over_one(dp) && dp != dp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the spec asks for dp=", dp, " but this trainer has ", dp_size,
                     " data-parallel rank(s); run it as a job (mtctl submit) for dp > 1"));
  }
  if (p.num_layers_per_virtual_pipeline_stage() > 0 && pp <= 1) {
    return absl::InvalidArgumentError(
        "parallel.num_layers_per_virtual_pipeline_stage needs pipeline parallelism");
  }
  return absl::OkStatus();
}

// This rank's part of the model: its tensor-parallel shard (options.groups; the whole model
// without groups), every layer.
model::ModelShard ModelShardOf(const TrainerOptions& options, const mt::v1::ParallelSpec& p) {
  model::ModelShard shard;
  if (options.groups != nullptr) {
    const parallel::GroupHandle& tp = options.groups->tp();
    shard.tp_size = tp.size;
    shard.tp_rank = tp.rank;
    // Shares ownership of the groups: the model's autograd graphs use the TP group.
    shard.tp_group = std::shared_ptr<const parallel::GroupHandle>(options.groups, &tp);
  }
  shard.sequence_parallel = p.sequence_parallel() && shard.tp_size > 1;
  shard.tp_comm_overlap = p.tp_comm_overlap();
  return shard;
}

// Megatron's allreduce_layernorm_grads: under sequence parallelism each TP rank computed the
// gradients of the replicated parameters (LayerNorms, row-parallel biases, the position
// embedding) from its part of the sequence only. Sums them over the TP group, in the
// optimizer's gradient buffer (where this step's gradients have accumulated).
absl::Status AllReduceSequenceParallelGradients(model::GptModel& model,
                                                MixedPrecisionOptimizer& optimizer) {
  const std::vector<std::string> names = model.SequenceParallelParameterNames();
  if (names.empty()) return absl::OkStatus();
  const std::set<std::string> wanted(names.begin(), names.end());
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const MixedPrecisionOptimizer::ParamSlot& slot : optimizer.slots()) {
    if (wanted.count(slot.name) == 0) continue;
    torch::Tensor g = optimizer.SlotGradient(slot);
    if (g.defined()) grads.push_back(g);
  }
  return parallel::AllReduceCoalesced(grads, model.shard().group());
}

// --overlap-param-gather with the distributed optimizer: the forward waits for each part's
// parameter buckets just before the part runs (Megatron's forward pre-hooks), rather than
// for every bucket before the step. `chunks` are this rank's model chunks in the order their
// first forwards run; parts are numbered across them.
bool GathersPerPart(const OptimizerParallelConfig& p) {
  return p.use_distributed_optimizer && p.overlap_param_gather && p.groups != nullptr &&
         p.groups->dp().size > 1;
}

void SetForwardPartsOf(const std::vector<std::shared_ptr<model::GptModel>>& chunks,
                       OptimizerParallelConfig* p) {
  std::map<std::string, int64_t> part;
  int64_t offset = 0;
  for (const auto& chunk : chunks) {
    for (const auto& item : chunk->named_parameters()) {
      const int64_t local = chunk->ForwardPartOf(item.key());
      if (local >= 0) part.emplace(item.key(), offset + local);
    }
    offset += chunk->num_forward_parts();
  }
  p->forward_part = [part](const std::string& name) {
    auto it = part.find(name);
    return it == part.end() ? int64_t{-1} : it->second;
  };
}

void InstallParameterWaits(const std::vector<std::shared_ptr<model::GptModel>>& chunks,
                           MixedPrecisionOptimizer* optimizer) {
  int64_t offset = 0;
  for (const auto& chunk : chunks) {
    chunk->SetForwardPreHook([optimizer, offset](int64_t part) {
      const absl::Status s = optimizer->WaitForParametersOfPart(offset + part);
      TORCH_CHECK(s.ok(), "waiting for the parameter all-gather: ", s.ToString());
    });
    offset += chunk->num_forward_parts();
  }
}

// Why the step cannot be one CUDA graph (StepGraphBlocker), or empty when it can.
std::string StepGraphBlockerOf(const TrainerOptions& options, const TrainPlan& plan,
                               const model::GptConfig& config, const torch::Device& device,
                               int tp_size, int pp_size) {
  if (!options.cuda_graph) return "turned off (--no-cuda-graph)";
  StepGraphSetting g;
  g.cuda = device.is_cuda();
  g.graphs_built = StepGraph::Available();
  g.data_parallel = plan.data_parallel_size;
  g.tensor_parallel = tp_size;
  g.pipeline_parallel = pp_size;
  g.micro_batches = plan.num_micro_batches;
  g.hidden_dropout = config.hidden_dropout;
  g.attention_dropout = config.attention_dropout;
  g.recompute_selective = config.recompute_granularity == model::RecomputeGranularity::kSelective;
  g.recompute_full = config.recompute_granularity == model::RecomputeGranularity::kFull;
  return StepGraphBlocker(g);
}

absl::StatusOr<TrainPlan> MakePlan(const mt::v1::JobSpec& spec, int64_t dp) {
  const mt::v1::TrainingSpec& t = spec.training();
  TrainPlan plan;
  plan.micro_batch_size = t.micro_batch_size();
  if (plan.micro_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.micro_batch_size ", t.micro_batch_size(), " must be >= 1"));
  }
  MT_RETURN_IF_ERROR(RequireResolvedBatch(t));
  plan.global_batch_size = t.global_batch_size();
  if (plan.global_batch_size % (plan.micro_batch_size * dp) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.global_batch_size ", plan.global_batch_size,
                     " is not a multiple of micro_batch_size ", plan.micro_batch_size,
                     " * data-parallel size ", dp));
  }
  plan.num_micro_batches = plan.global_batch_size / (plan.micro_batch_size * dp);
  plan.data_parallel_size = dp;
  if (spec.parallel().ddp_bucket_size() > 0) {
    plan.ddp_bucket_elements = spec.parallel().ddp_bucket_size();
  }
  plan.use_distributed_optimizer = spec.parallel().use_distributed_optimizer();
  plan.overlap_grad_reduce = spec.parallel().overlap_grad_reduce();
  plan.overlap_param_gather = spec.parallel().overlap_param_gather();
  plan.seq_length = spec.model().seq_length();
  if (t.train_iters() > 0 && t.train_samples() > 0) {
    return absl::InvalidArgumentError(
        "training: set one of train_iters and train_samples, not both");
  }
  if (t.train_iters() > 0) {
    plan.train_iterations = t.train_iters();
  } else if (t.train_samples() > 0) {
    plan.train_iterations = t.train_samples() / plan.global_batch_size;  // Megatron rounds down
  } else {
    return absl::InvalidArgumentError(
        "training: set train_iters (--train-iters) or train_samples (--train-samples)");
  }
  const mt::v1::EvaluationSpec& e = spec.evaluation();
  plan.eval_interval = e.has_eval_interval() ? e.eval_interval() : spec::kDefaultEvalInterval;
  plan.eval_iterations = e.has_eval_iters() ? e.eval_iters() : spec::kDefaultEvalIters;
  if (plan.eval_interval < 0 || plan.eval_iterations < 0) {
    return absl::InvalidArgumentError("evaluation.eval_interval and eval_iters must be >= 0");
  }
  plan.log_interval =
      spec.logging().has_log_interval() ? spec.logging().log_interval() : spec::kDefaultLogInterval;
  if (plan.log_interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("logging.log_interval ", plan.log_interval, " must be >= 1"));
  }
  plan.seed = t.has_seed() ? t.seed() : spec::kDefaultSeed;
  return plan;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm%02ds", s / 3600, s / 60 % 60, s % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

std::string FormatBytes(double bytes) {
  return absl::StrFormat("%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

MemoryStats ReadMemoryStats(const torch::Device& device) {
  MemoryStats m;
#if defined(MT_ENGINE_WITH_CUDA) && MT_ENGINE_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    m.is_cuda = true;
    m.allocated_bytes = stats.allocated_bytes[0].current;
    m.peak_allocated_bytes = stats.allocated_bytes[0].peak;
    m.reserved_bytes = stats.reserved_bytes[0].current;
    return m;
  }
#endif
  (void)device;
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return m;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  if (n != 2) return m;
  m.allocated_bytes = static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
  m.peak_allocated_bytes = m.allocated_bytes;
  m.reserved_bytes = m.allocated_bytes;
  return m;
}

// "mem 1.23 GiB (host RSS)" or "mem 10.10 GiB (peak 12.00 GiB, reserved 14.00 GiB)".
std::string MemoryString(const MemoryStats& m) {
  if (!m.is_cuda) {
    return absl::StrCat("mem ", FormatBytes(static_cast<double>(m.allocated_bytes)), " (host RSS)");
  }
  return absl::StrFormat("mem %s (peak %s, reserved %s)",
                         FormatBytes(static_cast<double>(m.allocated_bytes)),
                         FormatBytes(static_cast<double>(m.peak_allocated_bytes)),
                         FormatBytes(static_cast<double>(m.reserved_bytes)));
}

// How the optimizer spreads over the ranks: the spec's DP choices over this rank's groups.
absl::StatusOr<OptimizerParallelConfig> MakeOptimizerParallel(const TrainPlan& plan,
                                                              const TrainerOptions& options) {
  OptimizerParallelConfig p;
  p.groups = options.groups;
  if (plan.data_parallel_size > 1) {
    if (p.groups == nullptr || p.groups->dp().size != plan.data_parallel_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data parallelism over ", plan.data_parallel_size,
          " ranks needs TrainerOptions::groups with a DP group of that size (the optimizer "
          "reduces the gradients over it); run it as a job (mtctl submit)"));
    }
  }
  p.use_distributed_optimizer = plan.use_distributed_optimizer;
  p.overlap_grad_reduce = plan.overlap_grad_reduce;
  p.overlap_param_gather = plan.overlap_param_gather;
  p.bucket_elements = plan.ddp_bucket_elements;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Pipeline parallelism (pp > 1). Kept apart from the single-stage path: Trainer::StepImpl and
// EvaluateImpl call into it where the plain micro-batch loop would run.

// The module tree of `from` added to `into` under the same names (shared, not copied), so that
// the chunks of an interleaved stage appear to the optimizer as one module with the whole
// model's parameter names (embedding.*, decoder.layers.N.*, output_layer.weight, ...).
absl::Status MergeModules(torch::nn::Module& into, const torch::nn::Module& from,
                          const std::string& path) {
  for (const auto& item : from.named_parameters(/*recurse=*/false)) {
    if (into.named_parameters(/*recurse=*/false).contains(item.key())) {
      return absl::InternalError(absl::StrCat("two model chunks hold ", path, item.key()));
    }
    into.register_parameter(item.key(), item.value());
  }
  for (const auto& item : from.named_children()) {
    auto children = into.named_children();
    if (children.contains(item.key())) {
      MT_RETURN_IF_ERROR(
          MergeModules(*children[item.key()], *item.value(), path + item.key() + "."));
      continue;
    }
    auto holder = std::make_shared<torch::nn::Module>(item.value()->name());
    MT_RETURN_IF_ERROR(MergeModules(*holder, *item.value(), path + item.key() + "."));
    into.register_module(item.key(), holder);
  }
  return absl::OkStatus();
}

// This rank's stage: its model chunks, the executor of the schedule, and what the step does
// around it (the tied embedding's gradient over the embedding group; the global norm).
struct PipelineStage {
  std::shared_ptr<parallel::ProcessGroups> groups;
  // chunks[c] is virtual stage c*p + stage: a GptModel over its consecutive global layers;
  // the embedding on the first stage's chunk 0, final LayerNorm + output + loss on the last
  // stage's last chunk.
  std::vector<std::shared_ptr<model::GptModel>> chunks;
  // v > 1: every chunk under the whole model's names, for the optimizer.
  std::shared_ptr<torch::nn::Module> merged;
  std::unique_ptr<parallel::PipelineExecutor> executor;
  // The tied word embedding held here, by optimizer slot name ("" when none): the first
  // stage's embedding.word_embeddings.weight, the last stage's output_layer.weight copy.
  std::string tied_name;
  bool tied_copy = false;  // the last stage's copy: counted in the norm on the first stage only

  torch::nn::Module& module() {
    if (merged) return *merged;
    return *chunks[0];
  }
  void SetTraining(bool on) {
    for (auto& c : chunks) c->train(on);
  }

  static absl::StatusOr<std::unique_ptr<PipelineStage>> Create(
      const mt::v1::JobSpec& spec, const model::GptConfig& config, const TrainPlan& plan,
      std::shared_ptr<parallel::ProcessGroups> groups, const torch::Device& device,
      c10::ScalarType dtype) {
    auto st = std::make_unique<PipelineStage>();
    st->groups = groups;
    const mt::v1::Layout& layout = groups->layout();
    const int p = groups->pp().size;
    const int stage = groups->pp_rank();
    if (layout.stage_layers_size() != p) {
      return absl::InvalidArgumentError(absl::StrCat("the layout has ", layout.stage_layers_size(),
                                                     " stages' layers for pp=", p));
    }
    int chunks = 1;
    const int per_virtual = spec.parallel().num_layers_per_virtual_pipeline_stage();
    if (per_virtual > 0) chunks = static_cast<int>(config.num_layers / (p * per_virtual));
    const auto& layers = layout.stage_layers(stage).layers();
    if (chunks < 1 || layers.size() % chunks != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage ", stage, " holds ", layers.size(), " layers, not a multiple of ", chunks,
          " model chunks; num_layers must be a multiple of pp * num_layers_per_virtual_"
          "pipeline_stage"));
    }
    const int per_chunk = layers.size() / chunks;
    const bool tied = !config.untie_embeddings_and_output_weights;
    for (int c = 0; c < chunks; ++c) {
      model::ModelShard shard;
      shard.tp_size = groups->tp().size;
      shard.tp_rank = groups->tp_rank();
      shard.tp_group = std::make_shared<parallel::GroupHandle>(groups->tp());
      shard.sequence_parallel = spec.parallel().sequence_parallel() && shard.tp_size > 1;
      shard.tp_comm_overlap = spec.parallel().tp_comm_overlap();
      for (int i = c * per_chunk; i < (c + 1) * per_chunk; ++i) shard.layers.push_back(layers[i]);
      shard.pre_process = stage == 0 && c == 0;
      shard.post_process = stage == p - 1 && c == chunks - 1;
      // The one-stage trainer's build: every parameter drawn from (seed, its global name), so
      // a stage starts from exactly the whole model's weights.
      model::ModelBuildOptions build;
      build.seed = plan.seed;
      build.device = device;
      build.dtype = dtype;
      MT_ASSIGN_OR_RETURN(std::shared_ptr<model::GptModel> chunk,
                          model::GptModel::Create(config, shard, build));
      chunk->train();
      st->chunks.push_back(std::move(chunk));
    }
    if (chunks > 1) {
      st->merged = std::make_shared<torch::nn::Module>("GptStage");
      for (const auto& c : st->chunks) MT_RETURN_IF_ERROR(MergeModules(*st->merged, *c, ""));
    }
    if (tied && stage == 0) st->tied_name = "embedding.word_embeddings.weight";
    if (tied && stage == p - 1 && p > 1) {
      st->tied_name = model::GptModel::kSharedOutputWeightName;
      st->tied_copy = true;
    }
    parallel::PipelineConfig pc;
    pc.num_micro_batches = static_cast<int>(plan.num_micro_batches);
    pc.num_chunks = chunks;
    // [b, s, h]; under sequence parallelism each TP rank holds s/tp of the sequence.
    const int tp = groups->tp().size;
    const int64_t seq =
        spec.parallel().sequence_parallel() && tp > 1 ? plan.seq_length / tp : plan.seq_length;
    pc.activation_shape = {plan.micro_batch_size, seq, config.hidden_size};
    pc.activation_dtype = dtype;
    pc.device = device;
    pc.overlap_p2p_comm = spec.parallel().overlap_p2p_comm();
    MT_ASSIGN_OR_RETURN(st->executor, parallel::PipelineExecutor::Create(groups->pp(), pc));
    return st;
  }

  parallel::ChunkForward Forward() {
    return [this](int chunk, const torch::Tensor& input, const torch::Tensor& targets) {
      return chunks[chunk]->ForwardStage(input, targets);
    };
  }

  // The loss summed over the micro-batches, from the last stage, on every stage (on the
  // device: no host synchronisation on NCCL).
  absl::StatusOr<torch::Tensor> LossOnEveryStage(double loss_sum, const torch::Device& device) {
    MT_ASSIGN_OR_RETURN(double loss, executor->BroadcastFromLastStage(loss_sum));
    return torch::full({}, loss, torch::TensorOptions().dtype(torch::kDouble).device(device));
  }

  // Megatron's _allreduce_word_embedding_grads: the first stage's embedding and the last
  // stage's copy get the sum of both gradients, so both apply the same update and stay equal.
  // Before the optimizer's DP reduction (sums commute), where every rank holds its whole
  // gradient buffer also with the distributed optimizer.
  absl::Status SumTiedEmbeddingGradients(MixedPrecisionOptimizer& opt) {
    if (tied_name.empty() || !groups->embedding().active()) return absl::OkStatus();
    torch::NoGradGuard no_grad;
    // FinishMicroBatch ran after every backward: the step's gradients are in the buffer the
    // optimizer reduces and reads.
    for (const auto& slot : opt.slots()) {
      if (slot.name != tied_name) continue;
      return parallel::SumOverGroup(groups->embedding(), {opt.SlotGradient(slot)},
                                    "tied embedding gradient");
    }
    return absl::InternalError(absl::StrCat("no parameter ", tied_name, " on this stage"));
  }
};

}  // namespace

// The statistics of the steps since the last read, kept on the device so that a step does not
// wait for it (Trainer::SyncStepMetrics reads them).
struct DeviceStepStats {
  torch::Tensor loss_sum;    // losses of the steps not skipped
  torch::Tensor loss_count;  // steps not skipped
  torch::Tensor skipped;     // steps skipped
  torch::Tensor last_loss;
  torch::Tensor last_norm;
  torch::Tensor last_found_inf;

  void Add(const torch::Tensor& loss, const OptimizerStepResult& r) {
    torch::NoGradGuard no_grad;
    const torch::Tensor found_inf = r.found_inf_tensor().to(torch::kDouble);
    const torch::Tensor keep = 1.0 - found_inf;
    const torch::Tensor l = loss.to(torch::kDouble);
    // A skipped step's loss may be inf/NaN: where(), not a multiplication by 0.
    const torch::Tensor kept_loss = torch::where(keep > 0, l, torch::zeros_like(l));
    if (!loss_sum.defined()) {
      loss_sum = kept_loss;
      loss_count = keep;
      skipped = found_inf;
    } else {
      loss_sum = loss_sum + kept_loss;
      loss_count = loss_count + keep;
      skipped = skipped + found_inf;
    }
    last_loss = l;
    last_norm = r.grad_norm_tensor().to(torch::kDouble);
    last_found_inf = found_inf;
  }

  struct Values {
    double loss_sum = 0, loss_count = 0, skipped = 0, loss = 0, grad_norm = 0, found_inf = 0;
  };
  // One copy from the device for all of them; resets the sums.
  Values Take() {
    const torch::Tensor host =
        torch::stack({loss_sum, loss_count, skipped, last_loss, last_norm, last_found_inf})
            .to(torch::kCPU);
    const double* v = host.data_ptr<double>();
    loss_sum = loss_count = skipped = torch::Tensor();
    return Values{v[0], v[1], v[2], v[3], v[4], v[5]};
  }
};

struct Trainer::State {
  torch::Device device = torch::Device(torch::kCPU);
  c10::ScalarType dtype = torch::kFloat;
  std::shared_ptr<model::GptModel> model;
  std::unique_ptr<MixedPrecisionOptimizer> optimizer;
  // Pipeline parallelism (pp > 1); null otherwise. `model` is then its first chunk.
  std::unique_ptr<PipelineStage> pipeline;
  // TrainerOptions::cuda_graph where StepGraphBlocker allows it; null otherwise.
  std::unique_ptr<StepGraph> graph;
  // With `graph`: what the loss is multiplied by before backward (the loss scale over the
  // micro-batches), a device scalar filled before each replay, as the dynamic scale changes.
  torch::Tensor backward_scale;
  DeviceStepStats stats;

  // One batch from the source onto the device, checked.
  absl::StatusOr<torch::Tensor> ToDevice(const TokenBatch& batch, int64_t rows, int64_t cols,
                                         int64_t vocab_size) const {
    if (batch.rows != rows || batch.cols != cols ||
        static_cast<int64_t>(batch.tokens.size()) != rows * cols) {
      return absl::InvalidArgumentError(absl::StrCat("data: batch of ", batch.rows, "x", batch.cols,
                                                     " (", batch.tokens.size(), " tokens), want ",
                                                     rows, "x", cols));
    }
    for (size_t i = 0; i < batch.tokens.size(); ++i) {
      const int64_t tok = batch.tokens[i];
      if (tok < 0 || tok >= vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("data: token ", tok, " at position ", i,
                                                       " is outside the vocabulary [0, ",
                                                       vocab_size, ")"));
      }
    }
    const torch::Tensor host =
        torch::from_blob(const_cast<int64_t*>(batch.tokens.data()), {rows, cols}, torch::kLong);
    if (device.is_cuda()) {
      // A copy from pageable memory waits for the GPU's queue to drain; from pinned memory (the
      // caching host allocator keeps it alive until the copy is done) it does not, so the step
      // can queue its work ahead of the GPU.
      return host.pin_memory().to(device, torch::kLong, /*non_blocking=*/true);
    }
    return host.to(device, torch::kLong, /*non_blocking=*/false, /*copy=*/true);
  }
};

Trainer::Trainer(TrainPlan plan, LrSchedule schedule, LossScaler scaler, TrainerOptions options,
                 std::unique_ptr<BatchSource> train_data, std::unique_ptr<BatchSource> valid_data)
    : plan_(std::move(plan)),
      schedule_(std::move(schedule)),
      scaler_(std::move(scaler)),
      options_(std::move(options)),
      train_data_(std::move(train_data)),
      valid_data_(std::move(valid_data)),
      state_(std::make_unique<State>()) {}

Trainer::~Trainer() = default;

model::GptModel& Trainer::model() {
  if (state_->optimizer == nullptr) return *state_->model;
  if (absl::Status s = state_->optimizer->WaitForParameters(); !s.ok()) {
    MT_LOG(ERROR) << "waiting for the parameter all-gather: " << s;
  }
  return *state_->model;
}
MixedPrecisionOptimizer& Trainer::optimizer() { return *state_->optimizer; }
bool Trainer::has_optimizer() const { return state_->optimizer != nullptr; }
bool Trainer::step_graph_captured() const {
  return state_->graph != nullptr && state_->graph->captured();
}

std::vector<std::pair<std::string, torch::Tensor>> Trainer::Parameters() {
  model();  // waits for the parameter all-gathers
  return TrainableParameters(state_->pipeline != nullptr ? state_->pipeline->module()
                                                         : *state_->model);
}
MemoryStats Trainer::memory() const { return ReadMemoryStats(state_->device); }

std::vector<parallel::CommTime> Trainer::TakeCommunication() {
  if (options_.groups == nullptr || options_.groups->comm_stats() == nullptr) return {};
  return options_.groups->comm_stats()->Take();
}

// The model's configuration: the spec's, with the engine's kernel choices from `options`.
absl::StatusOr<model::GptConfig> ConfigOf(const mt::v1::JobSpec& spec,
                                          const TrainerOptions& options) {
  MT_ASSIGN_OR_RETURN(model::GptConfig config, model::GptConfig::FromSpec(spec));
  MT_ASSIGN_OR_RETURN(config.attention_backend, ParseBackend(options.attention_backend));
  config.fused_lm_head = options.fused_lm_head;
  config.fused_mlp = options.fused_mlp;
  MT_ASSIGN_OR_RETURN(config.mlp_gelu, ParseMlpGelu(options.mlp_gelu));
  config.fused_layernorm = options.fused_layernorm;
  config.fused_qkv = options.fused_qkv;
  config.fused_embedding = options.fused_embedding;
  config.fold_linear_bias = options.fold_linear_bias;
  config.fused_dropout_add = options.fused_dropout_add;
  return config;
}

// Checks and applies the GEMM tuning options (the kernels' process-wide tuning settings).
absl::Status ApplyGemmOptions(const TrainerOptions& options) {
  if (options.gemm_tune_candidates < 1 ||
      options.gemm_tune_candidates > kernels::kMaxGemmTuneCandidates) {
    return absl::InvalidArgumentError(absl::StrCat("gemm_tune_candidates ",
                                                   options.gemm_tune_candidates, ": want 1 to ",
                                                   kernels::kMaxGemmTuneCandidates));
  }
  kernels::SetGemmTuning(options.gemm_tuning);
  kernels::SetGemmTuneCandidates(options.gemm_tune_candidates);
  kernels::SetGemmWorkspace(options.gemm_workspace);
  return absl::OkStatus();
}

// The parameters' data type for training.precision, and its name into plan->precision.
absl::StatusOr<c10::ScalarType> DtypeOf(mt::v1::Precision precision, const torch::Device& device,
                                        TrainPlan* plan) {
  switch (precision) {
    case mt::v1::PRECISION_BF16:
      plan->precision = "bf16";
      return torch::kBFloat16;
    case mt::v1::PRECISION_FP16:
      plan->precision = "fp16";
      if (device.is_cpu()) {
        return absl::InvalidArgumentError(
            "training.precision fp16 needs a GPU (LibTorch has no fp16 matmul on the CPU); use "
            "bf16 or fp32");
      }
      return torch::kHalf;
    default:
      plan->precision = "fp32";
      return torch::kFloat;
  }
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const mt::v1::JobSpec& spec,
                                                         const TrainerOptions& options,
                                                         std::unique_ptr<BatchSource> train_data,
                                                         std::unique_ptr<BatchSource> valid_data) {
  if (train_data == nullptr) return absl::InvalidArgumentError("no training data source");
  const int dp_size = options.collectives != nullptr ? options.collectives->dp_size() : 1;
  const int tp_size = options.groups != nullptr ? options.groups->tp().size : 1;
  const int pp_size = options.groups != nullptr ? options.groups->pp().size : 1;
  MT_RETURN_IF_ERROR(CheckParallelism(spec.parallel(), dp_size, tp_size, pp_size));
  MT_ASSIGN_OR_RETURN(TrainPlan plan, MakePlan(spec, dp_size));
  MT_ASSIGN_OR_RETURN(const model::GptConfig config, ConfigOf(spec, options));
  MT_RETURN_IF_ERROR(ApplyGemmOptions(options));
  MT_ASSIGN_OR_RETURN(LrSchedule schedule,
                      LrSchedule::FromSpec(spec.training(), plan.global_batch_size));
  MT_ASSIGN_OR_RETURN(LossScaler scaler, options.force_dynamic_loss_scaling
                                             ? LossScaler::DynamicFromSpec(spec.training())
                                             : LossScaler::FromSpec(spec.training()));
  MT_ASSIGN_OR_RETURN(OptimizerConfig opt_config, OptimizerConfig::FromSpec(spec.training()));
  opt_config.num_micro_batches = plan.num_micro_batches;
  MT_ASSIGN_OR_RETURN(OptimizerParallelConfig opt_parallel, MakeOptimizerParallel(plan, options));
  MT_ASSIGN_OR_RETURN(torch::Device device, ParseDevice(options.device));
  MT_ASSIGN_OR_RETURN(const c10::ScalarType dtype,
                      DtypeOf(spec.training().precision(), device, &plan));
  plan.num_parameters = model::CountParameters(config);
  plan.flops_per_token = model::TrainingFlopsPerToken(plan.num_parameters, config.num_layers,
                                                      config.hidden_size, config.seq_length);

  std::unique_ptr<Trainer> trainer(new Trainer(plan, std::move(schedule), std::move(scaler),
                                               options, std::move(train_data),
                                               std::move(valid_data)));
  trainer->vocab_size_ = config.vocab_size;
  const std::string graph_blocker =
      StepGraphBlockerOf(options, plan, config, device, tp_size, pp_size);
  State& s = *trainer->state_;
  s.device = device;
  s.dtype = dtype;
  MT_RETURN_IF_ERROR(CatchTorch("building the model", [&]() -> absl::Status {
    if (pp_size > 1) {
      return trainer->CreatePipelineStage(spec, config, opt_config, opt_parallel);
    }
    return trainer->CreateModelAndOptimizer(spec, config, opt_config, opt_parallel,
                                            graph_blocker.empty());
  }));
  if (s.optimizer != nullptr && graph_blocker.empty()) {
    s.graph = std::make_unique<StepGraph>(device, s.model->parameters());
    s.backward_scale = torch::ones({}, torch::TensorOptions().device(device).dtype(torch::kFloat));
  }
  if (options.log_progress) trainer->LogSetup(graph_blocker);
  return trainer;
}

absl::Status Trainer::CreateModelAndOptimizer(const mt::v1::JobSpec& spec,
                                              const model::GptConfig& config,
                                              OptimizerConfig opt_config,
                                              OptimizerParallelConfig opt_parallel,
                                              bool step_graph) {
  State& s = *state_;
  model::ModelBuildOptions build;
  build.seed = plan_.seed;
  build.device = s.device;
  build.dtype = s.dtype;
  MT_ASSIGN_OR_RETURN(
      s.model, model::GptModel::Create(config, ModelShardOf(options_, spec.parallel()), build));
  s.model->train();
  // Sequence parallelism sums these gradients over TP after backward (StepImpl): their DP
  // buckets must not start before that.
  const std::vector<std::string> sp = s.model->SequenceParallelParameterNames();
  if (!sp.empty()) {
    const std::set<std::string> late(sp.begin(), sp.end());
    opt_parallel.late_gradient = [late](const std::string& n) { return late.count(n) > 0; };
  }
  if (options_.evaluation_only) return absl::OkStatus();
  // The forward waits part by part for the overlapped parameter gathers and update. The update
  // overlaps only a captured step, whose replays run at a higher priority (step_graph.h): in
  // an eager step, queued first, it would take the SMs before the forward.
  const bool per_part = GathersPerPart(opt_parallel);
  opt_config.overlap_update = options_.overlap_optimizer && step_graph;
  if (per_part || opt_config.overlap_update) SetForwardPartsOf({s.model}, &opt_parallel);
  MT_ASSIGN_OR_RETURN(s.optimizer,
                      MixedPrecisionOptimizer::Create(opt_config, *s.model, opt_parallel));
  if (per_part || s.optimizer->overlaps_update()) {
    InstallParameterWaits({s.model}, s.optimizer.get());
  }
  return absl::OkStatus();
}

void Trainer::LogSetup(const std::string& graph_blocker) const {
  const State& s = *state_;
  if (s.optimizer != nullptr) {
    if (s.graph != nullptr) {
      MT_LOG(INFO) << "trainer: each step's forward and backward replayed from a CUDA graph "
                      "(captured at the first step)";
    } else {
      MT_LOG(INFO) << "trainer: the step runs eagerly, not as a CUDA graph: " << graph_blocker;
    }
    if (s.optimizer->overlaps_update()) {
      MT_LOG(INFO) << "trainer: AdamW's update runs on a stream of its own, overlapping the "
                      "next forward part by part (--no-overlap-optimizer: in the step)";
    }
  }
  MT_LOG(INFO) << "trainer: " << s.model->config().DebugString() << "; " << plan_.num_parameters
               << " parameters; " << plan_.precision << " on " << s.device.str() << "; micro-batch "
               << plan_.micro_batch_size << " x " << plan_.num_micro_batches << " = global batch "
               << plan_.global_batch_size << "; " << plan_.train_iterations << " iterations; lr "
               << schedule_.config().DebugString();
  if (plan_.data_parallel_size > 1 && s.optimizer != nullptr) {
    MT_LOG(INFO) << "trainer: dp " << plan_.data_parallel_size << ", "
                 << s.optimizer->buckets().size()
                 << " gradient bucket(s) of <= " << plan_.ddp_bucket_elements << " elements"
                 << (plan_.use_distributed_optimizer ? ", distributed optimizer" : "")
                 << (plan_.overlap_grad_reduce ? ", overlapped reduction" : "")
                 << (plan_.overlap_param_gather ? ", overlapped parameter gather" : "");
  }
}

absl::StatusOr<StepMetrics> Trainer::Step() {
  if (state_->optimizer == nullptr) {
    return absl::FailedPreconditionError(
        "this trainer was built for evaluation only (TrainerOptions::evaluation_only): it has "
        "no optimizer to step");
  }
  return CatchTorch(absl::StrCat("training step ", iteration_ + 1), [this] { return StepImpl(); });
}

absl::StatusOr<StepMetrics> Trainer::StepImpl() {
  State& s = *state_;
  const Clock::time_point start = Clock::now();
  const int64_t rows = plan_.micro_batch_size;
  const int64_t cols = plan_.seq_length + 1;
  const int64_t num_micro = plan_.num_micro_batches;

  // 1. This step's learning rate and loss scale.
  const double lr = schedule_.LearningRate(consumed_samples_);
  const double loss_scale = scaler_.scale();

  // 2. Dropout masks from (seed, iteration) only.
  torch::manual_seed(StepSeed(plan_.seed, iteration_));

  // 3. Forward and backward over the micro-batches; gradients accumulate. With pipeline
  //    parallelism the schedule runs them over the stages (PipelineForwardBackward).
  s.model->train();
  MT_RETURN_IF_ERROR(s.optimizer->ZeroGrad());
  torch::Tensor loss_sum;
  double data_seconds = 0.0;
  const int64_t step = iteration_ + 1;
  if (s.pipeline != nullptr) {
    Tell(Activity::kForward, step);
    MT_ASSIGN_OR_RETURN(loss_sum, PipelineForwardBackward(loss_scale, &data_seconds));
  }
  // One micro-batch's forward and backward, the gradients accumulated; its detached loss.
  // The captured step reads the scale from the device and folds after the replay (step_graph.h).
  auto forward_backward = [&](const torch::Tensor& sample, bool last) {
    torch::Tensor loss = s.model->LossOnSample(sample);
    s.optimizer->BeginMicroBatch(last);
    Tell(Activity::kBackward, step);
    if (s.graph != nullptr) {
      (loss * s.backward_scale).backward();
    } else {
      (loss * (loss_scale / static_cast<double>(num_micro))).backward();
      s.optimizer->FinishMicroBatch();
    }
    return loss.detach();
  };
  for (int64_t m = 0; s.pipeline == nullptr && m < num_micro; ++m) {
    Tell(Activity::kData, step);
    const Clock::time_point data_start = Clock::now();
    MT_ASSIGN_OR_RETURN(TokenBatch batch, train_data_->Next(rows));
    data_seconds += SecondsSince(data_start);
    Tell(Activity::kForward, step);
    MT_ASSIGN_OR_RETURN(torch::Tensor sample, s.ToDevice(batch, rows, cols, vocab_size_));
    torch::Tensor loss;
    if (s.graph != nullptr) {  // one micro-batch (StepGraphBlocker)
      s.backward_scale.fill_(loss_scale / static_cast<double>(num_micro));
      MT_ASSIGN_OR_RETURN(
          loss, s.graph->Run(
                    sample, [&](const torch::Tensor& x) { return forward_backward(x, true); },
                    [&] { return s.optimizer->ZeroGrad(); }));
      s.optimizer->FinishMicroBatch();
    } else {
      loss = forward_backward(sample, /*last=*/m == num_micro - 1);
    }
    loss_sum = m == 0 ? loss : loss_sum + loss;
  }

  // 4. Sequence parallelism: sum the replicated parameters' partial gradients over TP.
  //    Pipeline: the tied embedding's two copies get the sum of their gradients. Both before
  //    the optimizer's DP reduction.
  if (s.pipeline == nullptr) {
    MT_RETURN_IF_ERROR(AllReduceSequenceParallelGradients(*s.model, *s.optimizer));
  } else {
    for (const auto& chunk : s.pipeline->chunks) {
      MT_RETURN_IF_ERROR(AllReduceSequenceParallelGradients(*chunk, *s.optimizer));
    }
    MT_RETURN_IF_ERROR(s.pipeline->SumTiedEmbeddingGradients(*s.optimizer));
  }

  // 5. Reduce the gradients over DP (started during the last backward with
  //    overlap_grad_reduce), unscale, check for inf/NaN, clip, update: all on the device. The norm
  //    spans every stage (the model-parallel group).
  Tell(Activity::kOptimizer, step);
  MT_ASSIGN_OR_RETURN(const OptimizerStepResult result, s.optimizer->Step(lr, loss_scale));
  s.stats.Add(loss_sum / static_cast<double>(num_micro), result);

  // 6. Bookkeeping; the device is waited for only where the values are needed.
  ++iteration_;
  consumed_samples_ += plan_.global_batch_size;
  StepMetrics m;
  m.iteration = iteration_;
  m.train_iterations = plan_.train_iterations;
  m.loss = m.grad_norm = m.interval_loss = std::nan("");
  const bool dynamic_scaling = scaler_.config().kind == LossScalerConfig::Kind::kDynamic;
  if (options_.sync_every_step || dynamic_scaling || IsLogStep(iteration_)) {
    MT_RETURN_IF_ERROR(SyncStepMetrics(&m));
  }
  scaler_.Update(m.skipped);  // only the dynamic scaler reads it, and then it is synced
  m.learning_rate = lr;
  m.loss_scale = loss_scale;
  m.skipped_total = skipped_total_;
  m.tokens = plan_.global_batch_size * plan_.seq_length;
  m.consumed_samples = consumed_samples_;
  m.seconds = SecondsSince(start);
  m.data_seconds = data_seconds;
  m.tokens_per_second = m.seconds > 0 ? static_cast<double>(m.tokens) / m.seconds : 0.0;
  m.mfu = model::ModelFlopsUtilization(m.tokens_per_second / NumDevices(), plan_.flops_per_token,
                                       options_.peak_flops_per_second);
  if (IsLogStep(iteration_) && interval_.loss_count > 0) {
    m.interval_loss = interval_.loss_sum / static_cast<double>(interval_.loss_count);
  }
  LogStep(&m);
  return m;
}

absl::StatusOr<double> Trainer::LastStepLoss() {
  if (synced_iteration_ == iteration_) return synced_loss_;
  // Nothing on the device since the last read: no step was taken in this process yet.
  if (!state_->stats.loss_sum.defined()) return std::nan("");
  return CatchTorch("reading the step's loss", [this]() -> absl::StatusOr<double> {
    StepMetrics m;
    MT_RETURN_IF_ERROR(SyncStepMetrics(&m));
    return synced_loss_;
  });
}

absl::Status Trainer::SyncStepMetrics(StepMetrics* m) {
  const DeviceStepStats::Values v = state_->stats.Take();
  // The read above waited for the step's work: the CUDA timings of its collectives are ready.
  if (options_.groups != nullptr && options_.groups->comm_stats() != nullptr) {
    options_.groups->comm_stats()->ResolveCompleted();
  }
  double loss = v.loss, loss_sum = v.loss_sum;
  parallel::Collectives* dp = options_.collectives;
  if (dp != nullptr && dp->dp_size() > 1) {
    // Skips are the same on every DP rank (the norm is global): the means of the sums are the
    // sums of the means.
    MT_ASSIGN_OR_RETURN(loss, dp->AverageScalar(loss));
    MT_ASSIGN_OR_RETURN(loss_sum, dp->AverageScalar(loss_sum));
  }
  skipped_total_ += static_cast<int64_t>(v.skipped);
  interval_.skipped += static_cast<int64_t>(v.skipped);
  interval_.loss_sum += loss_sum;
  interval_.loss_count += static_cast<int64_t>(v.loss_count);
  m->synced = true;
  m->loss = loss;
  synced_iteration_ = iteration_;
  synced_loss_ = loss;
  m->grad_norm = v.grad_norm;
  m->skipped = v.found_inf != 0.0;
  return absl::OkStatus();
}

void Trainer::LogStep(StepMetrics* step) {
  const StepMetrics& m = *step;
  total_seconds_ += m.seconds;
  interval_.steps += 1;
  interval_.tokens += m.tokens;
  interval_.seconds += m.seconds;
  if (!IsLogStep(m.iteration)) return;
  const double tokens_per_second =
      interval_.seconds > 0 ? static_cast<double>(interval_.tokens) / interval_.seconds : 0.0;
  const double mfu = model::ModelFlopsUtilization(
      tokens_per_second / NumDevices(), plan_.flops_per_token, options_.peak_flops_per_second);
  step->interval_tokens_per_second = tokens_per_second;
  step->interval_mfu = mfu;
  if (options_.log_progress) {
    const double step_seconds = interval_.seconds / static_cast<double>(interval_.steps);
    const double loss = interval_.loss_count > 0
                            ? interval_.loss_sum / static_cast<double>(interval_.loss_count)
                            : std::nan("");
    const int64_t remaining = std::max<int64_t>(0, plan_.train_iterations - m.iteration);
    MT_LOG(INFO) << absl::StrFormat(
        "step %d/%d | loss %.6E | lr %.3e | grad norm %.3f | loss scale %g | skipped %d | "
        "%.0f tokens/s | %.1f ms/step | MFU %s | %s | ETA %s",
        m.iteration, m.train_iterations, loss, m.learning_rate, m.grad_norm, m.loss_scale,
        interval_.skipped, tokens_per_second, step_seconds * 1e3,
        options_.peak_flops_per_second > 0 ? absl::StrFormat("%.1f%%", mfu * 100) : "-",
        MemoryString(memory()), FormatDuration(step_seconds * remaining));
  }
  interval_ = Interval();
}

absl::StatusOr<EvalMetrics> Trainer::Evaluate() {
  Tell(Activity::kEval, iteration_);
  return CatchTorch("evaluation", [this] { return EvaluateImpl(); });
}

absl::StatusOr<EvalMetrics> Trainer::EvaluateImpl() {
  if (valid_data_ == nullptr) return absl::FailedPreconditionError("no validation data");
  State& s = *state_;
  const Clock::time_point start = Clock::now();
  const int64_t rows = plan_.micro_batch_size;
  const int64_t cols = plan_.seq_length + 1;
  const int64_t batches = plan_.eval_iterations;
  EvalMetrics out;
  out.iteration = iteration_;
  out.batches = batches;
  if (batches == 0) return out;
  if (s.optimizer != nullptr) MT_RETURN_IF_ERROR(s.optimizer->WaitForParameters());
  s.model->eval();
  torch::Tensor loss_sum;
  if (s.pipeline != nullptr) {
    s.pipeline->SetTraining(false);
    absl::StatusOr<torch::Tensor> pipeline_loss = PipelineEvaluate(batches);
    s.pipeline->SetTraining(true);
    MT_ASSIGN_OR_RETURN(loss_sum, std::move(pipeline_loss));
  }
  if (s.pipeline == nullptr) {
    torch::NoGradGuard no_grad;
    for (int64_t i = 0; i < batches * plan_.num_micro_batches; ++i) {
      if (i > 0) Tell(Activity::kEval, iteration_);  // a move for the hang detector
      MT_ASSIGN_OR_RETURN(TokenBatch batch, valid_data_->Next(rows));
      MT_ASSIGN_OR_RETURN(torch::Tensor sample, s.ToDevice(batch, rows, cols, vocab_size_));
      torch::Tensor loss = s.model->LossOnSample(sample);
      loss_sum = i == 0 ? loss : loss_sum + loss;
    }
  }
  s.model->train();
  valid_consumed_samples_ += batches * plan_.global_batch_size;
  out.loss = loss_sum.item<double>() / static_cast<double>(batches * plan_.num_micro_batches);
  if (options_.collectives != nullptr && options_.collectives->dp_size() > 1) {
    MT_ASSIGN_OR_RETURN(out.loss, options_.collectives->AverageScalar(out.loss));
  }
  out.perplexity = std::exp(std::min(20.0, out.loss));
  out.seconds = SecondsSince(start);
  if (options_.log_progress) {
    MT_LOG(INFO) << absl::StrFormat(
        "validation at step %d | loss %.4f | perplexity %.3f | %d batches | %.1f s", iteration_,
        out.loss, out.perplexity, batches, out.seconds);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Pipeline parallelism: the parts of Create, StepImpl and EvaluateImpl that differ.

absl::Status Trainer::CreatePipelineStage(const mt::v1::JobSpec& spec,
                                          const model::GptConfig& config,
                                          const OptimizerConfig& opt_config,
                                          OptimizerParallelConfig opt_parallel) {
  State& s = *state_;
  MT_ASSIGN_OR_RETURN(
      s.pipeline, PipelineStage::Create(spec, config, plan_, options_.groups, s.device, s.dtype));
  s.model = s.pipeline->chunks[0];
  // The optimizer's norm sums over the model-parallel group: the last stage's copy of the tied
  // embedding is the first stage's parameter, counted there.
  if (s.pipeline->tied_copy) {
    const std::string name = s.pipeline->tied_name;
    opt_parallel.norm_duplicate = [name](const std::string& n) { return n == name; };
  }
  // Gradients summed over another group after backward (StepImpl): their DP buckets wait.
  std::set<std::string> late;
  for (const auto& chunk : s.pipeline->chunks) {
    for (const std::string& n : chunk->SequenceParallelParameterNames()) late.insert(n);
  }
  if (!s.pipeline->tied_name.empty()) late.insert(s.pipeline->tied_name);
  if (!late.empty()) {
    opt_parallel.late_gradient = [late](const std::string& n) { return late.count(n) > 0; };
  }
  // Interleaved: each chunk's last backward completes its gradients (overlap_grad_reduce).
  if (s.pipeline->chunks.size() > 1) {
    std::map<std::string, int> chunk_of;
    for (size_t c = 0; c < s.pipeline->chunks.size(); ++c) {
      for (const auto& item : s.pipeline->chunks[c]->named_parameters()) {
        chunk_of.emplace(item.key(), static_cast<int>(c));
      }
    }
    opt_parallel.model_chunk = [chunk_of](const std::string& n) {
      auto it = chunk_of.find(n);
      return it == chunk_of.end() ? 0 : it->second;
    };
  }
  const bool per_part = GathersPerPart(opt_parallel);
  if (!options_.evaluation_only) {
    if (per_part) SetForwardPartsOf(s.pipeline->chunks, &opt_parallel);
    MT_ASSIGN_OR_RETURN(s.optimizer, MixedPrecisionOptimizer::Create(
                                         opt_config, s.pipeline->module(), opt_parallel));
    if (per_part) InstallParameterWaits(s.pipeline->chunks, s.optimizer.get());
  }
  if (options_.log_progress) {
    const parallel::ProcessGroups& g = *options_.groups;
    MT_LOG(INFO) << "trainer: pipeline stage " << g.pp_rank() << " of " << g.pp().size << ", "
                 << s.pipeline->chunks.size() << " model chunk(s), layers ["
                 << absl::StrJoin(g.layout().stage_layers(g.pp_rank()).layers(), ",") << "]"
                 << (spec.parallel().overlap_p2p_comm() ? ", overlapped send/recv" : "");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<parallel::PipelineMicroBatch>> Trainer::ReadMicroBatches(
    BatchSource& source, int64_t count, double* data_seconds) {
  State& s = *state_;
  const int64_t rows = plan_.micro_batch_size;
  const int64_t cols = plan_.seq_length + 1;
  std::vector<parallel::PipelineMicroBatch> out;
  for (int64_t m = 0; m < count; ++m) {
    const Clock::time_point data_start = Clock::now();
    // Every stage reads the same micro-batches in the same order (the first needs the tokens,
    // the last the targets), so that all stages stay at the same place in the data.
    MT_ASSIGN_OR_RETURN(TokenBatch batch, source.Next(rows));
    if (data_seconds != nullptr) *data_seconds += SecondsSince(data_start);
    MT_ASSIGN_OR_RETURN(torch::Tensor sample, s.ToDevice(batch, rows, cols, vocab_size_));
    out.push_back({sample.narrow(1, 0, plan_.seq_length), sample.narrow(1, 1, plan_.seq_length)});
  }
  return out;
}

absl::StatusOr<torch::Tensor> Trainer::PipelineForwardBackward(double loss_scale,
                                                               double* data_seconds) {
  State& s = *state_;
  PipelineStage& stage = *s.pipeline;
  MT_ASSIGN_OR_RETURN(std::vector<parallel::PipelineMicroBatch> micro_batches,
                      ReadMicroBatches(*train_data_, plan_.num_micro_batches, data_seconds));
  stage.SetTraining(true);
  // Each chunk's last backward arms its gradient hooks (overlap_grad_reduce).
  MT_ASSIGN_OR_RETURN(
      parallel::PipelineStepResult r,
      stage.executor->Train(
          stage.Forward(), micro_batches, loss_scale, [&s] { s.optimizer->FinishMicroBatch(); },
          [&s](int chunk, bool last) { s.optimizer->BeginMicroBatch(last, chunk); }));
  return stage.LossOnEveryStage(r.loss_sum, s.device);
}

absl::StatusOr<torch::Tensor> Trainer::PipelineEvaluate(int64_t batches) {
  State& s = *state_;
  PipelineStage& stage = *s.pipeline;
  torch::Tensor loss_sum;
  for (int64_t b = 0; b < batches; ++b) {
    if (b > 0) Tell(Activity::kEval, iteration_);  // a move for the hang detector
    MT_ASSIGN_OR_RETURN(std::vector<parallel::PipelineMicroBatch> micro_batches,
                        ReadMicroBatches(*valid_data_, plan_.num_micro_batches, nullptr));
    MT_ASSIGN_OR_RETURN(parallel::PipelineStepResult r,
                        stage.executor->Evaluate(stage.Forward(), micro_batches));
    MT_ASSIGN_OR_RETURN(torch::Tensor loss, stage.LossOnEveryStage(r.loss_sum, s.device));
    loss_sum = loss_sum.defined() ? loss_sum + loss : loss;
  }
  return loss_sum;
}

absl::Status Trainer::RestoreProgress(int64_t iteration, int64_t consumed_samples,
                                      int64_t skipped_iterations, int64_t valid_consumed_samples) {
  if (iteration < 0 || consumed_samples < 0 || skipped_iterations < 0 ||
      valid_consumed_samples < 0) {
    return absl::InvalidArgumentError("checkpoint counters must be >= 0");
  }
  iteration_ = iteration;
  consumed_samples_ = consumed_samples;
  skipped_total_ = skipped_iterations;
  if (valid_data_ != nullptr && valid_consumed_samples > valid_consumed_samples_) {
    // This rank reads micro_batch samples per Next() of every micro_batch * dp global ones.
    const int64_t per_read = plan_.micro_batch_size * plan_.data_parallel_size;
    for (int64_t n = valid_consumed_samples_; n + per_read <= valid_consumed_samples;
         n += per_read) {
      MT_RETURN_IF_ERROR(valid_data_->Next(plan_.micro_batch_size).status());
    }
  }
  valid_consumed_samples_ = valid_consumed_samples;
  return absl::OkStatus();
}

absl::Status Trainer::Train(const std::function<bool(const StepMetrics&)>& on_step,
                            const std::function<void(const EvalMetrics&)>& on_eval,
                            const std::function<bool()>& after_step) {
  const bool evaluate =
      valid_data_ != nullptr && plan_.eval_interval > 0 && plan_.eval_iterations > 0;
  int64_t last_eval = -1;
  auto run_eval = [&]() -> absl::Status {
    MT_ASSIGN_OR_RETURN(EvalMetrics e, Evaluate());
    last_eval = iteration_;
    if (on_eval) on_eval(e);
    return absl::OkStatus();
  };
  while (iteration_ < plan_.train_iterations) {
    MT_ASSIGN_OR_RETURN(StepMetrics m, Step());
    if (on_step && !on_step(m)) return absl::OkStatus();
    if (evaluate && iteration_ % plan_.eval_interval == 0) MT_RETURN_IF_ERROR(run_eval());
    if (after_step && !after_step()) return absl::OkStatus();
  }
  if (evaluate && last_eval != iteration_) MT_RETURN_IF_ERROR(run_eval());
  return absl::OkStatus();
}

}  // namespace mt::engine
