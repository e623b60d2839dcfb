#include "common/layout/job_layout.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/layout/layout.h"

namespace mt::layout {
namespace {

void AddGroups(const std::vector<std::vector<int>>& groups,
               google::protobuf::RepeatedPtrField<mt::v1::RankGroup>* out) {
  for (const auto& g : groups) {
    mt::v1::RankGroup* pg = out->Add();
    for (int r : g) pg->add_ranks(r);
  }
}

}  // namespace

absl::StatusOr<mt::v1::Layout> JobLayout(const mt::v1::JobSpec& spec, int world) {
  const auto& p = spec.parallel();
  MT_ASSIGN_OR_RETURN(ParallelDims dims,
                      ResolveDims(p.tensor_model_parallel_size(), p.context_parallel_size(),
                                  p.pipeline_model_parallel_size(), p.data_parallel_size(), world));
  MT_ASSIGN_OR_RETURN(RankLayout rl, RankLayout::Create(dims));
  int chunks = 1;
  if (p.num_layers_per_virtual_pipeline_stage() > 0) {
    chunks = spec.model().num_layers() / (dims.pp * p.num_layers_per_virtual_pipeline_stage());
  }
  std::vector<int> split(p.pipeline_layer_split().begin(), p.pipeline_layer_split().end());
  MT_ASSIGN_OR_RETURN(auto stages, StageLayers(spec.model().num_layers(), dims.pp, chunks, split));
  const int micro = spec.training().micro_batch_size();
  const int global = spec.training().global_batch_size() > 0 ? spec.training().global_batch_size()
                                                             : micro * dims.dp;
  if (global % (micro * dims.dp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.global_batch_size (", global, ") must be divisible by micro_batch_size (", micro,
        ") * data_parallel_size (", dims.dp, ") = ", micro * dims.dp));
  }
  mt::v1::Layout out;
  out.set_world_size(rl.world());
  out.set_tensor_model_parallel_size(dims.tp);
  out.set_context_parallel_size(dims.cp);
  out.set_pipeline_model_parallel_size(dims.pp);
  out.set_data_parallel_size(dims.dp);
  for (const auto& s : stages) {
    mt::v1::StageLayers* sl = out.add_stage_layers();
    for (int l : s) sl->add_layers(l);
  }
  AddGroups(rl.TensorGroups(), out.mutable_tensor_groups());
  AddGroups(rl.PipelineGroups(), out.mutable_pipeline_groups());
  AddGroups(rl.DataGroups(), out.mutable_data_groups());
  AddGroups(rl.EmbeddingGroups(), out.mutable_embedding_groups());
  AddGroups(rl.ContextGroups(), out.mutable_context_groups());
  AddGroups(rl.ModelParallelGroups(), out.mutable_model_parallel_groups());
  out.set_num_micro_batches(global / (micro * dims.dp));
  return out;
}

}  // namespace mt::layout
