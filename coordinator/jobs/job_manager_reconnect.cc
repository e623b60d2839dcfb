// JobManager's worker registration (job_manager.h, "Worker registration"): what a daemon that
// registers again says it runs, squared with what the coordinator placed on it. The cases, as a
// cut link that comes back produces them (tests/multinode/):
//   - the answer to the daemon's registration was lost, the job was placed on the worker
//     meanwhile, and the daemon registers again naming no rank: the worker stays the rank's and
//     the assignment that waits for it is not doubled;
//   - the assignment went out on a stream that broke: it is sent again;
//   - the rank ran there and ended while the coordinator could not hear it: its exit report
//     follows; FailOrphans fails the rank if none came within kMissingRankGrace.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/jobs/job_state.h"

namespace mt::coordinator {
namespace {

// SIGTERM -> SIGKILL grace of a rank the coordinator does not expect where it runs.
constexpr int kStaleRankGraceSeconds = 1;

bool Names(const std::vector<mt::v1::RunningRank>& running, const std::string& job_id, int attempt,
           int rank) {
  for (const mt::v1::RunningRank& rr : running) {
    if (rr.job_id() == job_id && rr.attempt() == attempt && rr.rank() == rank) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<mt::v1::Worker> JobManager::RegisterWorker(const mt::v1::RegisterRequest& request,
                                                          WorkerRegistry::Issued* issued) {
  absl::MutexLock lock(&mu_);
  MT_ASSIGN_OR_RETURN(mt::v1::Worker worker, registry_->Register(request, issued));
  const std::vector<mt::v1::RunningRank> running(request.running().begin(),
                                                 request.running().end());
  StopUnexpectedRanks(worker, running);
  KeepPlacedRanks(worker, running);
  ScheduleLocked();
  absl::StatusOr<mt::v1::Worker> now = registry_->Get(worker.id());
  return now.ok() ? *now : worker;
}

void JobManager::StopUnexpectedRanks(const mt::v1::Worker& worker,
                                     const std::vector<mt::v1::RunningRank>& running) {
  for (const auto& rr : running) {
    auto entry = Find(rr.job_id());
    const bool expected = entry.ok() && !IsTerminal((*entry)->job.state()) &&
                          (*entry)->job.attempt() == rr.attempt() && rr.rank() >= 0 &&
                          rr.rank() < static_cast<int>((*entry)->ranks.size()) &&
                          (*entry)->ranks[rr.rank()].worker_id == worker.id();
    if (expected) {
      (*entry)->ranks[rr.rank()].missing_since = absl::InfinitePast();
      continue;
    }
    mt::v1::WorkerCommand cmd;
    cmd.mutable_stop()->set_job_id(rr.job_id());
    cmd.mutable_stop()->set_attempt(rr.attempt());
    // Its attempt is over (its peers are stopped or never were): nothing it could save would
    // be whole, and a rank blocked in a collective with them ignores SIGTERM. The job's next
    // attempt may be waiting for this worker.
    cmd.mutable_stop()->set_grace_seconds(kStaleRankGraceSeconds);
    cmd.mutable_stop()->set_reason("the coordinator does not expect this rank here");
    Enqueue(worker.id(), std::move(cmd));
  }
}

void JobManager::KeepPlacedRanks(const mt::v1::Worker& worker,
                                 const std::vector<mt::v1::RunningRank>& running) {
  const absl::Time now = clock_->Now();
  for (int64_t id : placed_) {
    JobEntry& entry = *jobs_.at(id);
    const mt::v1::JobState state = entry.job.state();
    if (state != mt::v1::JOB_STATE_SCHEDULED && state != mt::v1::JOB_STATE_RUNNING) continue;
    for (size_t r = 0; r < entry.ranks.size(); ++r) {
      RankState& rank = entry.ranks[r];
      if (rank.worker_id != worker.id() || rank.outcome != mt::v1::RANK_OUTCOME_UNSPECIFIED ||
          Names(running, entry.job.id(), entry.job.attempt(), static_cast<int>(r))) {
        continue;
      }
      // Registering without ranks made it IDLE: it is still this rank's. A worker that took
      // other work meanwhile (not possible under mu_, but cheap to say) leaves the rank to
      // FailOrphans.
      if (worker.state() == mt::v1::WORKER_STATE_IDLE &&
          !registry_->Assign(worker.id(), entry.job.id(), static_cast<int>(r)).ok()) {
        continue;
      }
      if (rank.phase == mt::v1::RANK_PHASE_UNSPECIFIED) {
        if (mailboxes_.PushAssignmentOnce(worker.id(),
                                          AssignCommand(entry.job, static_cast<int>(r)))) {
          MT_LOG(INFO) << entry.job.id() << " rank " << r << ": assignment sent again to "
                       << worker.id() << " (registered again without it)";
        }
      } else if (rank.missing_since == absl::InfinitePast()) {
        rank.missing_since = now;
      }
    }
  }
}

bool JobManager::HoldsLiveRank(const JobEntry& entry, const std::string& worker_id) {
  for (const RankState& rank : entry.ranks) {
    if (rank.worker_id == worker_id && rank.outcome == mt::v1::RANK_OUTCOME_UNSPECIFIED) {
      return true;
    }
  }
  return false;
}

}  // namespace mt::coordinator
