#include "worker/train/sharded_generate.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/spec/inference.h"
#include "worker/parallel/process_groups.h"

namespace mt::train {

generate::TensorParallelPlace TensorParallelPlaceOf(
    std::shared_ptr<parallel::ProcessGroups> groups) {
  generate::TensorParallelPlace tp;
  tp.rank = groups->tp_rank();
  tp.size = groups->tp().size;
  const parallel::GroupHandle* group = &groups->tp();
  tp.group = std::shared_ptr<const parallel::GroupHandle>(std::move(groups), group);
  return tp;
}

absl::StatusOr<GenerateRun> GenerateSharded(const mt::v1::JobSpec& spec,
                                            const ShardedGenerateOptions& options,
                                            const generate::TextCallback& on_text) {
  const mt::v1::ParallelSpec& p = spec.parallel();
  const int tp = std::max(1, p.tensor_model_parallel_size());
  if (std::max(1, p.pipeline_model_parallel_size()) != 1 ||
      std::max(1, p.data_parallel_size()) != 1 || p.context_parallel_size() > 1) {
    return absl::InvalidArgumentError(
        "a generation job splits its model over tensor-parallel ranks only (PP = DP = CP = 1)");
  }
  if (tp != std::max(1, options.tp.size) || options.tp.rank < 0 || options.tp.rank >= tp) {
    return absl::InvalidArgumentError(
        absl::StrCat("TP rank ", options.tp.rank, " of ", options.tp.size, " in a job of TP ", tp));
  }
  bool usage_error = false;
  return GenerateFromArgs(spec::GenerateCommandArgs(spec, {"--device", options.device}), on_text,
                          &usage_error, options.tp);
}

}  // namespace mt::train
