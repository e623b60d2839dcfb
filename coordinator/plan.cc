#include "coordinator/plan.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
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

int64_t EstimateStateBytesPerRank(const mt::v1::JobSpec& spec, const mt::v1::Layout& layout) {
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
  const int64_t params =
      params_total / (layout.tensor_model_parallel_size() * layout.pipeline_model_parallel_size());
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

absl::StatusOr<mt::v1::PlanJobResponse> PlanOnWorkers(
    const mt::v1::JobSpec& submitted, const std::vector<mt::v1::Worker>& free_workers) {
  mt::v1::JobSpec spec = submitted;
  spec::ApplyDefaults(&spec);
  MT_RETURN_IF_ERROR(spec::ValidateSpec(spec));

  std::vector<mt::v1::Worker> gpu, cpu;
  for (const auto& w : free_workers) {
    if (spec.resources().nodes_size() > 0 &&
        std::find(spec.resources().nodes().begin(), spec.resources().nodes().end(),
                  w.resources().node()) == spec.resources().nodes().end()) {
      continue;
    }
    (w.resources().gpu_index() >= 0 ? gpu : cpu).push_back(w);
  }
  const int requested = RequestedWorld(spec);
  std::vector<mt::v1::Worker> pool = WantsGpu(spec, gpu, requested) ? gpu : cpu;
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
  absl::StatusOr<std::vector<int>> slots = layout::PlaceRanksOnSlots(rl, slot_nodes);
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
