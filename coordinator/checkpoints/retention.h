// Which checkpoints a job's retention policy lets go (proto/mt/v1/job_spec.proto
// RetentionPolicy). Pure: the catalog (catalog.h) feeds it the job's checkpoints and deletes
// what it returns.
//
// The rule: with keep_last = 0 nothing is deleted (the policy is off). Otherwise a checkpoint
// is kept when any of these holds, and deleted when none does:
//   - it is among the keep_last newest (by step);
//   - it is among the keep_best with the lowest validation loss (NaN never counts as best;
//     ties go to the newer step);
//   - keep_every_steps > 0 and its step is a multiple of it;
//   - it is the save directory's `latest` (never deleted);
//   - a job is loading it (never deleted).
//
// Thread-compatible free function.
#ifndef MT_COORDINATOR_CHECKPOINTS_RETENTION_H_
#define MT_COORDINATOR_CHECKPOINTS_RETENTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "mt/v1/job_spec.pb.h"

namespace mt::coordinator {

struct RetentionCandidate {
  std::string id;
  int64_t step = 0;
  double validation_loss = 0;  // NaN when no evaluation preceded the save
  bool is_latest = false;
  bool in_use = false;  // a job is loading it
};

// The ids to delete, in the order of `candidates`.
std::vector<std::string> SelectForDeletion(const std::vector<RetentionCandidate>& candidates,
                                           const mt::v1::RetentionPolicy& policy);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_CHECKPOINTS_RETENTION_H_
