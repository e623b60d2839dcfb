// A rank loaded an older checkpoint than the `latest` of its directory: the trainer skips a
// newest checkpoint that fails verification and falls back to the newest one that verifies
// (common/checkpoint/checkpoint_dir.h ChooseCheckpoint), which the rank only logs. This turns
// the rank's load report into the job event that says so. Reads the save directory's `latest`
// file (the shared file system the coordinator already reads for restarts); thread-safe.
#ifndef MT_COORDINATOR_JOBS_LOAD_FALLBACK_H_
#define MT_COORDINATOR_JOBS_LOAD_FALLBACK_H_

#include <optional>
#include <string>

#include "mt/v1/worker_service.pb.h"

namespace mt::coordinator {

// The event text when `loaded` (a RankReport.checkpoint_load) is older than the `latest` of
// the save directory holding it; nullopt when it is the latest or there is no `latest`.
std::optional<std::string> DescribeLoadFallback(const mt::v1::CheckpointReport& loaded);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOBS_LOAD_FALLBACK_H_
