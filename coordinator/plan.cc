#include "coordinator/plan.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/layout/job_layout.h"
#include "common/layout/layout.h"
#include "common/spec/defaults.h"
#include "common/spec/validate.h"

namespace mt::coordinator {
namespace {

int ModelParallelSize(const mt::v1::JobSpec& spec) {
  const auto& p = spec.parallel();
  return std::max(1, p.tensor_model_parallel_size()) * std::max(1, p.context_parallel_size()) *
         std::max(1, p.pipeline_model_parallel_size());
}

bool WantsGpu(const mt::v1::JobSpec& spec, const std::vector<mt::v1::Worker>& gpu_workers,
              int needed) {
  switch (spec.resources().device()) {
    case mt::v1::DEVICE_KIND_GPU:
      return true;
    case mt::v1::DEVICE_KIND_CPU:
      return false;
    default:
      // AUTO: GPUs whenever there are any that could hold the job.
      return !gpu_workers.empty() &&
             (needed == 0 || static_cast<int>(gpu_workers.size()) >= needed);
  }
}

// The workers a job would run on: those of its nodes (if it names any), GPUs or CPUs by its
// device kind (AUTO: GPUs whenever there are enough).
struct Pool {
  std::vector<mt::v1::Worker> workers;
  bool gpu = false;
};
Pool SelectPool(const mt::v1::JobSpec& spec, const std::vector<mt::v1::Worker>& workers) {
  std::vector<mt::v1::Worker> gpu, cpu;
  for (const auto& w : workers) {
    if (spec.resources().nodes_size() > 0 &&
        std::find(spec.resources().nodes().begin(), spec.resources().nodes().end(),
                  w.resources().node()) == spec.resources().nodes().end()) {
      continue;
    }
    (w.resources().gpu_index() >= 0 ? gpu : cpu).push_back(w);
  }
  if (WantsGpu(spec, gpu, RequestedWorld(spec))) return {std::move(gpu), true};
  return {std::move(cpu), false};
}

std::string GiB(int64_t bytes) {
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30));
}

}  // namespace

int RequestedWorld(const mt::v1::JobSpec& spec) {
  const auto& p = spec.parallel();
  if (p.world_size() > 0) return p.world_size();
  if (p.data_parallel_size() > 0) return ModelParallelSize(spec) * p.data_parallel_size();
  return 0;
}

int AutoWorld(const mt::v1::JobSpec& spec, int free_slots) {
  const int mp = ModelParallelSize(spec);
  const int micro = std::max(1, spec.training().micro_batch_size());
  const int global = spec.training().global_batch_size();
  for (int dp = free_slots / mp; dp >= 1; --dp) {
    if (global == 0 || global % (micro * dp) == 0) return dp * mp;
  }
  return 0;
}

absl::StatusOr<mt::v1::Layout> ComputeLayout(const mt::v1::JobSpec& spec, int world) {
  return layout::JobLayout(spec, world);
}

namespace {

// A model's parameters as a rank of `layout` holds them (1 / (TP x PP) of them), and of those
// the transformer layers' linear weights (what --quantize int8 stores in a byte).
struct RankParams {
  int64_t all = 0, linear = 0, padded_vocab = 0;
};

RankParams ParamsPerRank(const mt::v1::JobSpec& spec, const mt::v1::Layout& layout) {
  const auto& m = spec.model();
  const int64_t h = m.hidden_size(), L = m.num_layers();
  const int64_t ffn = m.ffn_hidden_size() > 0 ? m.ffn_hidden_size() : 4 * h;
  const int64_t divisible =
      int64_t{m.make_vocab_size_divisible_by()} * layout.tensor_model_parallel_size();
  const int64_t vocab = m.vocab_size() > 0 ? m.vocab_size() : 50257;
  const int64_t padded_vocab =
      divisible > 0 ? (vocab + divisible - 1) / divisible * divisible : vocab;
  const int64_t per_layer = 4 * h * h + 4 * h + 2 * h * ffn + ffn + h + 4 * h;  // attn, mlp, 2 LN
  const int64_t seq =
      m.max_position_embeddings() > 0 ? m.max_position_embeddings() : m.seq_length();
  const int64_t params_total = L * per_layer + (padded_vocab + seq) * h + 2 * h;
  const int64_t shards = std::max(1, layout.tensor_model_parallel_size()) *
                         std::max(1, layout.pipeline_model_parallel_size());
  return {params_total / shards, L * (4 * h * h + 2 * h * ffn) / shards, padded_vocab};
}

}  // namespace

int64_t EstimateStateBytesPerRank(const mt::v1::JobSpec& spec, const mt::v1::Layout& layout) {
  const int64_t params = ParamsPerRank(spec, layout).all;
  const bool half = spec.training().precision() == mt::v1::PRECISION_FP16 ||
                    spec.training().precision() == mt::v1::PRECISION_BF16;
  // Model weights + gradients: 2+2 bytes in half precision (4+4 in fp32); fp32 master copy
  // (half only) and Adam moments: 12 (or 8) bytes, sharded over DP with the distributed
  // optimizer.
  const int64_t weights_and_grads = half ? 4 : 8;
  int64_t optimizer = half ? 12 : 8;
  int64_t opt_bytes = params * optimizer;
  if (spec.parallel().use_distributed_optimizer()) opt_bytes /= layout.data_parallel_size();
  return params * weights_and_grads + opt_bytes;
}

bool HoldsWeightsOnly(const mt::v1::JobSpec& spec) {
  const mt::v1::InferenceSpec& inference = spec.inference();
  return inference.has_generate() || inference.has_eval();
}

namespace {

// Bytes of a weight on a rank of an inference job (InferenceBytes::weights).
int64_t InferenceWeightBytes(const mt::v1::JobSpec& spec, const mt::v1::Layout& layout, bool gpu) {
  if (!gpu) return 4;
  if (!spec.inference().has_eval() || layout.world_size() <= 1) return 2;  // --dtype auto
  const mt::v1::Precision p = spec.training().precision();
  return p == mt::v1::PRECISION_BF16 || p == mt::v1::PRECISION_FP16 ? 2 : 4;
}

}  // namespace

InferenceBytes EstimateInferenceBytesPerRank(const mt::v1::JobSpec& spec,
                                             const mt::v1::Layout& layout, bool gpu) {
  const auto& m = spec.model();
  const RankParams params = ParamsPerRank(spec, layout);
  const int64_t t = std::max(1, layout.tensor_model_parallel_size());
  const int64_t h = m.hidden_size(), heads = std::max(1, m.num_attention_heads());
  const int64_t ffn = m.ffn_hidden_size() > 0 ? m.ffn_hidden_size() : 4 * h;
  const int64_t positions =
      m.max_position_embeddings() > 0 ? m.max_position_embeddings() : m.seq_length();
  const int64_t bytes = InferenceWeightBytes(spec, layout, gpu);
  const mt::v1::InferenceSpec& inference = spec.inference();
  const std::string& quantize =
      inference.has_eval() ? inference.eval().quantize() : inference.generate().quantize();
  InferenceBytes out;
  out.weights = quantize == "int8" ? params.linear + (params.all - params.linear) * bytes
                                   : params.all * bytes;
  // Rows and positions of the largest forward: a micro-batch of the context (eval), or the
  // samples over the prompt and the new tokens, whose KV cache the rank keeps (generate; the
  // prompt's tokens are at most its bytes).
  int64_t rows = 0, len = 0;
  if (inference.has_eval()) {
    const mt::v1::EvalTask& eval = inference.eval();
    rows = eval.has_micro_batch_size() ? eval.micro_batch_size()
                                       : std::max(1, spec.training().micro_batch_size());
    len = eval.has_context_length() ? eval.context_length() : m.seq_length();
    // The fp32 logits of every position, and their log-softmax in the cross entropy.
    out.activations = 2 * 4 * rows * len * params.padded_vocab / t;
  } else {
    const mt::v1::GenerateTask& generate = inference.generate();
    rows = generate.has_num_samples() ? generate.num_samples() : 1;
    const int64_t max_new = generate.has_max_new_tokens() ? generate.max_new_tokens() : 64;
    len = std::min<int64_t>(positions, static_cast<int64_t>(generate.prompt().size()) + max_new);
    out.kv_cache = 2 * m.num_layers() * rows * len * h / t * bytes;
    // The fp32 logits of the last position: logits, probabilities, the sorted copy of top-p.
    out.activations = 3 * 4 * rows * params.padded_vocab;
  }
  // One layer's tensors at a time (no autograd): its input, QKV and MLP outputs; on a CPU the
  // attention's fp32 scores too (a GPU's fused attention keeps none).
  out.activations += rows * len * (4 * h + ffn / t) * bytes;
  if (!gpu) out.activations += 4 * rows * (heads / t) * len * len;
  return out;
}

int64_t EstimateActivationBytesPerRank(const mt::v1::JobSpec& spec, const mt::v1::Layout& layout) {
  const auto& m = spec.model();
  const int64_t t = std::max(1, layout.tensor_model_parallel_size());
  const int64_t pp = std::max(1, layout.pipeline_model_parallel_size());
  const int64_t cp = std::max(1, layout.context_parallel_size());
  const int64_t dp = std::max(1, layout.data_parallel_size());
  const int64_t h = m.hidden_size(), a = std::max(1, m.num_attention_heads());
  const int64_t s = m.seq_length() / cp, b = std::max(1, spec.training().micro_batch_size());
  const bool sp = spec.parallel().sequence_parallel() && t > 1;
  const int64_t sbh = s * b * h;
  int64_t per_layer = 0;  // bytes in half precision
  switch (spec.training().recompute_granularity()) {
    case mt::v1::RECOMPUTE_GRANULARITY_FULL:
      per_layer = 2 * sbh / (sp ? t : 1);
      break;
    case mt::v1::RECOMPUTE_GRANULARITY_SELECTIVE:
      per_layer = sp ? 34 * sbh / t : 10 * sbh + 24 * sbh / t;
      break;
    default:
      per_layer = (sp ? 34 * sbh / t : 10 * sbh + 24 * sbh / t) + 5 * a * s * s * b / t;
  }
  if (spec.training().precision() != mt::v1::PRECISION_FP16 &&
      spec.training().precision() != mt::v1::PRECISION_BF16) {
    per_layer *= 2;
  }
  const int64_t global = spec.training().global_batch_size();
  const int64_t micro_batches = global > 0 ? std::max<int64_t>(1, global / (b * dp)) : pp;
  const int64_t layers = (m.num_layers() + pp - 1) / pp * std::min(pp, micro_batches);
  return layers * per_layer + 4 * s * b * ParamsPerRank(spec, layout).padded_vocab / t;
}

absl::Status CheckMemoryFits(const mt::v1::JobSpec& spec,
                             const std::vector<mt::v1::Worker>& live_workers) {
  const Pool selected = SelectPool(spec, live_workers);
  const std::vector<mt::v1::Worker>& pool = selected.workers;
  int64_t largest = 0;
  for (const auto& w : pool) {
    if (w.resources().memory_bytes() <= 0) return absl::OkStatus();  // not known yet
    largest = std::max(largest, w.resources().memory_bytes());
  }
  if (pool.empty()) return absl::OkStatus();
  int world = RequestedWorld(spec);
  if (world == 0)
    world = std::max(AutoWorld(spec, static_cast<int>(pool.size())), ModelParallelSize(spec));
  MT_ASSIGN_OR_RETURN(mt::v1::Layout layout, ComputeLayout(spec, world));
  if (HoldsWeightsOnly(spec)) {
    const InferenceBytes need = EstimateInferenceBytesPerRank(spec, layout, selected.gpu);
    if (need.total() <= largest) return absl::OkStatus();
    const bool generate = spec.inference().has_generate();
    return absl::FailedPreconditionError(absl::StrCat(
        "no ", selected.gpu ? "GPU" : "CPU", " worker can hold a rank of this ",
        generate ? "generation" : "evaluation", " job: it needs about ", GiB(need.total()),
        " per rank (weights ", GiB(need.weights), generate ? ", KV cache " : "",
        generate ? GiB(need.kv_cache) : "", ", activations ", GiB(need.activations),
        ") but the largest has ", GiB(largest), "; raise --tensor-model-parallel-size",
        generate ? "" : " or --pipeline-model-parallel-size",
        ", use --quantize int8 (one rank), or lower ",
        generate ? "-n or --max-new-tokens" : "--micro-batch-size or --context-length"));
  }
  const int64_t state = EstimateStateBytesPerRank(spec, layout);
  const int64_t activations = EstimateActivationBytesPerRank(spec, layout);
  if (state + activations <= largest) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "no ", selected.gpu ? "GPU" : "CPU", " worker can hold a rank of this job: it needs about ",
      GiB(state + activations), " per rank (weights, gradients and optimizer state ", GiB(state),
      ", activations ", GiB(activations), ") but the largest has ", GiB(largest),
      "; raise tensor/pipeline parallelism, set parallel.use_distributed_optimizer, use "
      "training.recompute_granularity: full, or lower training.micro_batch_size"));
}

absl::StatusOr<mt::v1::PlanJobResponse> PlanOnWorkers(
    const mt::v1::JobSpec& submitted, const std::vector<mt::v1::Worker>& free_workers) {
  mt::v1::JobSpec spec = submitted;
  spec::ApplyDefaults(&spec);
  MT_RETURN_IF_ERROR(spec::ValidateSpec(spec));

  const int requested = RequestedWorld(spec);
  Pool selected = SelectPool(spec, free_workers);
  std::vector<mt::v1::Worker>& pool = selected.workers;
  // Slots in (node, GPU index) order so that a node's GPUs are adjacent and in order.
  std::sort(pool.begin(), pool.end(), [](const mt::v1::Worker& a, const mt::v1::Worker& b) {
    return std::make_pair(a.resources().node(), a.resources().gpu_index()) <
           std::make_pair(b.resources().node(), b.resources().gpu_index());
  });

  mt::v1::PlanJobResponse out;
  int world = requested;
  if (world == 0) {
    world = AutoWorld(spec, static_cast<int>(pool.size()));
    if (world == 0) {
      // Show the smallest layout (DP=1) and say why it cannot be placed.
      world = ModelParallelSize(spec);
      out.add_warnings(absl::StrCat("dp: auto with ", pool.size(),
                                    " free workers; showing the layout for DP=1"));
    }
  }
  MT_ASSIGN_OR_RETURN(*out.mutable_layout(), ComputeLayout(spec, world));
  out.set_estimated_state_bytes_per_rank(EstimateStateBytesPerRank(spec, out.layout()));

  std::vector<std::string> slot_nodes;
  for (const auto& w : pool) slot_nodes.push_back(w.resources().node());
  MT_ASSIGN_OR_RETURN(
      layout::RankLayout rl,
      layout::RankLayout::Create(layout::ParallelDims{
          out.layout().tensor_model_parallel_size(), out.layout().context_parallel_size(),
          out.layout().pipeline_model_parallel_size(), out.layout().data_parallel_size()}));
  absl::StatusOr<std::vector<int>> slots =
      layout::PlaceRanksOnSlots(rl, slot_nodes, selected.gpu ? "GPU" : "CPU");
  if (!slots.ok()) {
    out.set_placeable(false);
    out.set_reason(std::string(slots.status().message()));
    return out;
  }
  out.set_placeable(true);
  for (int rank = 0; rank < rl.world(); ++rank) {
    const mt::v1::Worker& w = pool[(*slots)[rank]];
    const layout::RankCoord c = rl.Coord(rank);
    mt::v1::RankPlacement* p = out.add_placement();
    p->mutable_coordinates()->set_rank(rank);
    p->mutable_coordinates()->set_tp(c.tp);
    p->mutable_coordinates()->set_cp(c.cp);
    p->mutable_coordinates()->set_dp(c.dp);
    p->mutable_coordinates()->set_pp(c.pp);
    p->set_worker_id(w.id());
    p->set_node(w.resources().node());
    p->set_gpu_index(w.resources().gpu_index());
  }
  return out;
}

}  // namespace mt::coordinator
