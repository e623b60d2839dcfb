// What the trainer asks of a spec before it trains on it: that it was resolved for its layout
// (common/spec/defaults.h). The trainer reads training.global_batch_size and derives nothing, so
// the coordinator, `mt-worker train` and the trainer cannot disagree on the batch (issue 14).
// Thread-safe free functions; no state.
#ifndef MT_WORKER_ENGINE_RESOLVED_SPEC_H_
#define MT_WORKER_ENGINE_RESOLVED_SPEC_H_

#include "absl/status/status.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::engine {

// OK when training.global_batch_size is set. FAILED_PRECONDITION when it is 0 (the front end
// did not call spec::ResolveForLayout once it knew the data-parallel size), INVALID_ARGUMENT
// when it is negative.
absl::Status RequireResolvedBatch(const mt::v1::TrainingSpec& training);

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_RESOLVED_SPEC_H_
