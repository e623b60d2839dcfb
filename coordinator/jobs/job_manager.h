// The coordinator's job control: the queue, gang scheduling, dispatch to workers, progress,
// completion, cancellation, the rendezvous key-value space, and watchers.
//
// Jobs live in memory and in the Store; every state change is written (with its event)
// before it is visible. The state machine is coordinator/jobs/job_state.h.
//
// Scheduling: PENDING jobs in order of priority (high first), then id (FIFO). A job is placed
// whole (every rank) or not at all, on IDLE workers, by coordinator/plan.h. A job that could
// fit on the cluster's live workers but not on the free ones blocks the jobs behind it (no
// backfilling, so large jobs are not starved); a job larger than the whole cluster waits
// without blocking others.
//
// Cost: a pass walks the PENDING jobs in order from an index (no scan of every job), and a job
// already planned at the registry's current capacity version is not planned again (its
// placement cannot have changed), so a pass over a blocked queue costs O(log n) whatever its
// length. Queue positions come from the same index.
//
// Dispatch: each worker has a mailbox of commands (assign, stop) that its StreamAssignments
// call drains; commands queued while no stream is open wait for the next one.
//
// Thread-safe: one mutex guards everything; Store writes happen under it, so the order of
// events in the database is the order in which they happened.
#ifndef MT_COORDINATOR_JOBS_JOB_MANAGER_H_
#define MT_COORDINATOR_JOBS_JOB_MANAGER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "coordinator/jobs/job_observer.h"
#include "coordinator/store/store.h"
#include "coordinator/workers/registry.h"
#include "mt/v1/client_service.pb.h"
#include "mt/v1/worker_service.pb.h"

namespace mt::coordinator {

struct JobManagerOptions {
  // Seconds a stopped rank gets between SIGTERM and SIGKILL.
  int stop_grace_seconds = 10;
  // Coordinator address handed to ranks for rendezvous and reports.
  std::string coordinator_address;
  // Limits on what clients may ask for.
  int max_jobs = 1'000'000;
  // Hears of every state transition (optional; outlives the manager).
  JobObserver* observer = nullptr;
};

class JobManager {
 public:
  // Loads every job from `store`. `store`, `registry` and `clock` outlive the manager.
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(Store* store, WorkerRegistry* registry,
                                                            const Clock* clock,
                                                            JobManagerOptions options);

  // --- Client API -------------------------------------------------------------------------
  // Defaults and validates the spec (INVALID_ARGUMENT naming the field; nothing stored then),
  // stores the job as PENDING and runs a scheduling pass.
  absl::StatusOr<mt::v1::SubmitJobResponse> Submit(const mt::v1::JobSpec& spec,
                                                   const std::string& request_id);
  absl::StatusOr<mt::v1::Job> Get(const std::string& job_id, bool include_events);
  absl::StatusOr<mt::v1::ListJobsResponse> List(const mt::v1::ListJobsRequest& request);
  absl::StatusOr<mt::v1::Job> Cancel(const std::string& job_id, const std::string& reason);
  absl::StatusOr<mt::v1::GetJobLogsResponse> Logs(const mt::v1::GetJobLogsRequest& request);
  // Blocks until the job changed after `seen_version` (or `timeout` passed, or the manager
  // shuts down) and returns its snapshot and version. NOT_FOUND for an unknown job.
  struct Snapshot {
    mt::v1::Job job;
    uint64_t version = 0;
    std::optional<mt::v1::JobEvent> last_event;
  };
  absl::StatusOr<Snapshot> WaitForChange(const std::string& job_id, uint64_t seen_version,
                                         absl::Duration timeout);
  // Counts by state and the queue length, for GetClusterInfo and metrics.
  std::map<mt::v1::JobState, int> CountByState();

  // --- Worker API -------------------------------------------------------------------------
  // Takes the next commands for a worker, waiting up to `timeout`; empty when none.
  std::vector<mt::v1::WorkerCommand> TakeCommands(const std::string& worker_id,
                                                  absl::Duration timeout);
  absl::Status OnRankReport(const mt::v1::RankReport& report);
  absl::Status OnRankExit(const mt::v1::RankExitReport& report);
  // A worker was declared lost: its job restarts or fails (restart_policy.h).
  void OnWorkerLost(const std::string& worker_id);
  // Restarts or fails active jobs with a rank whose worker is not (or no longer) running it,
  // e.g. after a coordinator restart when that worker never came back. Call only once workers
  // have had `lost_after` to re-register.
  void FailOrphans();
  // Moves RESTARTING jobs on once every rank of the failed attempt ended (or the stop grace
  // plus a margin passed): finds the newest checkpoint of save_dir that verifies and queues the
  // job again from it, or fails it (restart_policy.h). Verification reads every checkpoint
  // file, outside the lock: call from a thread of its own (the server's restarter), not from
  // an RPC handler.
  void AdvanceRestarts();
  // A worker (re-)registered reporting these running ranks; ranks the coordinator does not
  // expect there are told to stop.
  void OnWorkerRegistered(const mt::v1::Worker& worker,
                          const std::vector<mt::v1::RunningRank>& running);

  // --- Rendezvous ---------------------------------------------------------------------------
  absl::Status RendezvousSet(const std::string& job_id, int attempt, const std::string& key,
                             const std::string& value);
  absl::StatusOr<std::vector<std::string>> RendezvousGet(const std::string& job_id, int attempt,
                                                         const std::vector<std::string>& keys,
                                                         absl::Duration timeout);
  absl::StatusOr<int64_t> RendezvousAdd(const std::string& job_id, int attempt,
                                        const std::string& key, int64_t delta);

  // --- Checkpoint catalog -------------------------------------------------------------------
  // Jobs not in a terminal state with their checkpoint directories: the catalog keeps what
  // they may load (coordinator/checkpoints/catalog.h).
  struct CheckpointDirs {
    std::string job_id;
    mt::v1::JobState state = mt::v1::JOB_STATE_UNSPECIFIED;
    std::string load_dir;
    std::string save_dir;
  };
  std::vector<CheckpointDirs> ActiveCheckpointDirs();

  // The address ranks use to reach the coordinator, once the port is bound.
  void SetCoordinatorAddress(const std::string& address);

  // One scheduling pass (also run after every submit, exit and registration).
  void Schedule();
  // Wakes every waiter (watchers, mailboxes, rendezvous) so that they return.
  void Shutdown();

 private:
  struct RankState {
    std::string worker_id;
    mt::v1::RankPhase phase = mt::v1::RANK_PHASE_UNSPECIFIED;
    mt::v1::RankOutcome outcome = mt::v1::RANK_OUTCOME_UNSPECIFIED;
    std::vector<std::string> log_tail;
    std::string message;
  };
  struct JobEntry {
    int64_t id = 0;  // numeric part of job.id
    mt::v1::Job job;
    uint64_t version = 1;
    std::optional<mt::v1::JobEvent> last_event;
    std::vector<RankState> ranks;  // for the current attempt
    // The registry capacity version at which a pass last found this PENDING job unplaceable
    // (0 = not since it last changed state), and whether it then blocked the jobs behind it.
    uint64_t planned_version = 0;
    bool planned_blocks = false;
    // While RESTARTING: the failure that started the restart, and since when.
    std::string restart_cause;
    absl::Time restart_since = absl::InfinitePast();
  };

  JobManager(Store* store, WorkerRegistry* registry, const Clock* clock, JobManagerOptions options)
      : store_(store), registry_(registry), clock_(clock), options_(std::move(options)) {}

  absl::StatusOr<JobEntry*> Find(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a job to `to` with `reason`, persisting job and event together.
  absl::Status Transition(JobEntry* entry, mt::v1::JobState to, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Persist(JobEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps pending_, placed_ and state_counts_ in step with a job whose state moves from `from`
  // to `to` (from = UNSPECIFIED for a job new to memory).
  void Reindex(const JobEntry& entry, mt::v1::JobState from, mt::v1::JobState to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The PENDING job after (priority, id) in scheduling order, the first when `after` is empty;
  // nullptr at the end.
  JobEntry* NextPending(const std::optional<std::pair<int, int64_t>>& after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends a stop to every rank of the job's current attempt still running and frees workers
  // whose ranks already ended.
  void StopRanks(JobEntry* entry, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank of a SCHEDULED or RUNNING job failed (`cause`): RESTARTING with the other ranks
  // stopped, or FAILED (restart_policy.h DecideOnFailure). No-op in any other state.
  absl::Status FailOrRestart(JobEntry* entry, const std::string& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(const std::string& worker_id, mt::v1::WorkerCommand command)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseWorker(const std::string& worker_id, const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rank whose progress speaks for the job: last pipeline stage, tp = cp = dp = 0.
  static int ReporterRank(const mt::v1::Layout& layout);
  int64_t QueuePosition(const JobEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;
  WorkerRegistry* const registry_;
  const Clock* const clock_;
  const JobManagerOptions options_;

  absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::string coordinator_address_ ABSL_GUARDED_BY(mu_);
  // Ordered by numeric id.
  std::map<int64_t, std::unique_ptr<JobEntry>> jobs_ ABSL_GUARDED_BY(mu_);
  // PENDING job ids by priority (highest first), each in id order: the scheduling order.
  // Groups are never empty.
  std::map<int, std::deque<int64_t>, std::greater<int>> pending_ ABSL_GUARDED_BY(mu_);
  // Jobs that hold or are stopping ranks (SCHEDULED, RUNNING, RESTARTING), by id.
  std::set<int64_t> placed_ ABSL_GUARDED_BY(mu_);
  // Jobs in each state (states with none are absent).
  std::map<mt::v1::JobState, int> state_counts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::deque<mt::v1::WorkerCommand>> mailboxes_
      ABSL_GUARDED_BY(mu_);
  // Rendezvous space per "job_id/attempt".
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, std::string>> rendezvous_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOBS_JOB_MANAGER_H_
