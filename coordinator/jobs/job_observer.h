// What the job manager tells an observer (the coordinator's metrics) about job state changes.
// Called with the job manager's lock held: implementations are thread-safe, quick, and never
// call back into the job manager.
#ifndef MT_COORDINATOR_JOBS_JOB_OBSERVER_H_
#define MT_COORDINATOR_JOBS_JOB_OBSERVER_H_

#include "absl/time/time.h"
#include "mt/v1/job.pb.h"

namespace mt::coordinator {

class JobObserver {
 public:
  virtual ~JobObserver() = default;
  // `job` is already in state `to` (attempt, times and reason updated).
  virtual void OnJobTransition(const mt::v1::Job& job, mt::v1::JobState from, mt::v1::JobState to,
                               absl::Time now) = 0;
  // `job` (ended) was deleted, by hand or by retention: whatever is kept for it goes, so that
  // what an observer holds stays bounded by the jobs the coordinator keeps.
  virtual void OnJobDeleted(const mt::v1::Job& job) {}
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOBS_JOB_OBSERVER_H_
