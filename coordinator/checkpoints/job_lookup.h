// The checkpoint catalog's view of the JobManager (catalog.h CheckpointJobs).
// Thread-safe (the JobManager is).
#ifndef MT_COORDINATOR_CHECKPOINTS_JOB_LOOKUP_H_
#define MT_COORDINATOR_CHECKPOINTS_JOB_LOOKUP_H_

#include <string>
#include <vector>

#include "coordinator/checkpoints/catalog.h"
#include "coordinator/jobs/job_manager.h"

namespace mt::coordinator {

class JobManagerCheckpointJobs final : public CheckpointJobs {
 public:
  // `jobs` outlives this object.
  explicit JobManagerCheckpointJobs(JobManager* jobs) : jobs_(jobs) {}

  std::vector<Active> ActiveJobs() override {
    std::vector<Active> out;
    for (auto& d : jobs_->ActiveCheckpointDirs()) {
      out.push_back({std::move(d.job_id), d.state, std::move(d.load_dir), std::move(d.save_dir)});
    }
    return out;
  }
  absl::StatusOr<mt::v1::Job> GetJob(const std::string& job_id) override {
    return jobs_->Get(job_id, /*include_events=*/false);
  }

 private:
  JobManager* const jobs_;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_CHECKPOINTS_JOB_LOOKUP_H_
