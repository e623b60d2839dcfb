#include "worker/engine/resolved_spec.h"

#include "absl/strings/str_cat.h"

namespace mt::engine {

absl::Status RequireResolvedBatch(const mt::v1::TrainingSpec& training) {
  const int64_t global = training.global_batch_size();
  if (global == 0) {
    return absl::FailedPreconditionError(
        "training.global_batch_size is 0: the spec was not resolved for its layout; call "
        "spec::ResolveForLayout once the data-parallel size is known");
  }
  if (global < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.global_batch_size ", global, " must be >= 1"));
  }
  return absl::OkStatus();
}

}  // namespace mt::engine
