// The coordinator's job control: the owner of every job's state and of its transitions
// (coordinator/jobs/job_state.h): submit, progress, completion, cancellation, restarts and
// watchers. It decides what happens to a job and delegates the rest to parts of their own:
//
//   coordinator/scheduler/   the placement pass over the PENDING index (priority, then FIFO;
//                            gang placement; the blocking rule; the O(log n) capacity-version
//                            skip; queue positions). JobManager is its PlacementTarget: it
//                            records each decision as a transition.
//   coordinator/rendezvous/  the per-(job, attempt) key-value store of the ranks; JobManager
//                            checks that the attempt is live and drops its space when it ends.
//   coordinator/workers/mailboxes.h
//                            the assign/stop commands on their way to each worker's
//                            StreamAssignments call.
//   coordinator/jobs/restart_policy.h
//                            whether a failure restarts the job and from which checkpoint.
//
// Jobs live in memory and in the Store; every state change is written (with its event)
// before it is visible.
//
// Spec: Submit stores the defaulted, validated spec; the first placement resolves what
// depends on the layout (spec::ResolveForLayout: the global batch when left to DP) and stores
// that, so the assignment and the trainer read it instead of deriving it again.
//
// Thread-safe. One mutex (mu_) guards the jobs, and the scheduler runs under it: every Store
// write happens under it, so the order of events in the database is the order in which they
// happened. The rendezvous store and the mailboxes have mutexes of their own, taken only while
// mu_ is held or with nothing held (lock order: mu_ before theirs); waiting for rendezvous keys
// or for commands holds neither mu_ nor blocks the job manager.
#ifndef MT_COORDINATOR_JOBS_JOB_MANAGER_H_
#define MT_COORDINATOR_JOBS_JOB_MANAGER_H_

#include <cstdint>
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
#include "coordinator/jobs/hang_detector.h"
#include "coordinator/jobs/job_observer.h"
#include "coordinator/jobs/straggler_tracker.h"
#include "coordinator/rendezvous/rank_credentials.h"
#include "coordinator/rendezvous/rendezvous_store.h"
#include "coordinator/scheduler/scheduler.h"
#include "coordinator/store/store.h"
#include "coordinator/workers/mailboxes.h"
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
  // Issues each assignment's rank_credential (optional: none, assignments carry none and the
  // worker service refuses their rendezvous; outlives the manager).
  const RankCredentials* rank_credentials = nullptr;
  // The coordinator's --allowed-root list (resolved), sent with every assignment so that the
  // worker checks the job's paths against it again right before the rank starts
  // (worker/daemon/assignment_paths.h); empty = not confined.
  std::vector<std::string> allowed_roots;
};

class JobManager : private PlacementTarget {
 public:
  // Loads every job from `store`. `store`, `registry` and `clock` outlive the manager.
  static absl::StatusOr<std::unique_ptr<JobManager>> Create(Store* store, WorkerRegistry* registry,
                                                            const Clock* clock,
                                                            JobManagerOptions options);

  // --- Client API -------------------------------------------------------------------------
  // Defaults and validates the spec (INVALID_ARGUMENT naming the field; nothing stored then),
  // stores the job as PENDING and runs a scheduling pass. `owner` is recorded as Job.owner (the
  // submitting token's name; coordinator/job_access.h).
  absl::StatusOr<mt::v1::SubmitJobResponse> Submit(const mt::v1::JobSpec& spec,
                                                   const std::string& request_id,
                                                   const std::string& owner = "");
  absl::StatusOr<mt::v1::Job> Get(const std::string& job_id, bool include_events);
  absl::StatusOr<mt::v1::ListJobsResponse> List(const mt::v1::ListJobsRequest& request);
  // `by` (optional) names who cancelled, for the job's event log. The job is CANCELLED at
  // once; its ranks stop the way a stop signal stops them (every rank at the same step, saved
  // when the job has checkpoint.save_dir), killed if they have not exited within the job's
  // restart.save_load_timeout_seconds plus stop_grace_seconds. `no_save` kills them at once.
  // Once every rank has exited, an event says which step was saved.
  absl::StatusOr<mt::v1::Job> Cancel(const std::string& job_id, const std::string& reason,
                                     const std::string& by = "", bool no_save = false);
  // Forgets an ended job whose ranks have all exited (memory and store; its id is never
  // reused) and returns it. FAILED_PRECONDITION naming the fix otherwise.
  absl::StatusOr<mt::v1::Job> Delete(const std::string& job_id);
  // Retention of ended jobs: deletes those beyond the newest `keep` (0 = no count limit) and
  // those that ended more than `max_age` ago (zero = no age limit). Returns how many.
  int PruneEnded(int keep, absl::Duration max_age);
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
  // --- Worker registration (job_manager_reconnect.cc) ---------------------------------------
  // Registers a worker daemon (registry.h Register; `issued` receives its secrets) and squares
  // what it says it runs (request.running) with what the coordinator placed on it, under one
  // lock so that no placement comes between:
  //   - ranks it runs that the coordinator does not expect there are told to stop (1 s grace:
  //     their attempt is over, and one blocked in a collective ignores SIGTERM);
  //   - a rank of a SCHEDULED/RUNNING job placed on it that it does not name keeps the worker
  //     (BUSY). If that rank never reported, its assignment may never have reached the daemon
  //     (the answer to an earlier registration, or the stream carrying it, was lost): it is
  //     sent again (the daemon ignores an assignment of an attempt it already ran). If it did
  //     report, it ended there and its exit report follows the registration: FailOrphans
  //     fails it when none came within kMissingRankGrace.
  absl::StatusOr<mt::v1::Worker> RegisterWorker(const mt::v1::RegisterRequest& request,
                                                WorkerRegistry::Issued* issued);
  static constexpr absl::Duration kMissingRankGrace = absl::Seconds(10);

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

  // --- Hang and straggler detection (job_manager_health.cc) -------------------------------
  // Restarts SCHEDULED and RUNNING jobs with a hung rank (hang_detector.h; SCHEDULED: a rank
  // that does not reach training, within the floor from the placement, the event naming its
  // phase) and refreshes their "no progress for N s". Call periodically (the server's
  // restarter).
  void CheckHangs();
  // Per rank of RUNNING jobs, for metrics: the straggler ratio (when known).
  struct RankHealth {
    std::string job_id;
    int rank = 0;
    double step_time_ratio = 0;
  };
  std::vector<RankHealth> RankHealthSnapshot();
  // Per RUNNING job: seconds since its most stalled rank last moved.
  std::map<std::string, double> NoProgressSeconds();
  // Hangs detected since the coordinator started.
  int64_t HangsDetected();
  // Failed checkpoint saves (once per job and step, whatever the number of ranks that report
  // it) since the coordinator started.
  int64_t CheckpointSaveFailures();

  // --- Generation jobs (job_manager_generate.cc) ------------------------------------------
  // The text a generation job's rank reported (RankReport.generated) is kept in memory until
  // ReleaseGenerated (at most kMaxGeneratedBytes a job; a coordinator restart loses it).
  // WaitForGenerated blocks until there is text after `cursor` (an index into the job's
  // messages), the job ended, or `timeout`; it returns the messages from `cursor` on with the
  // job's state and reason. NOT_FOUND for an unknown job.
  struct GeneratedSince {
    std::vector<mt::v1::GeneratedText> texts;
    mt::v1::JobState state = mt::v1::JOB_STATE_UNSPECIFIED;
    std::string reason;
  };
  absl::StatusOr<GeneratedSince> WaitForGenerated(const std::string& job_id, size_t cursor,
                                                  absl::Duration timeout);
  // Drops the job's text; later text is not kept.
  void ReleaseGenerated(const std::string& job_id);
  static constexpr int64_t kMaxGeneratedBytes = int64_t{64} << 20;

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
    // Since when its worker, registering again, no longer names it (RegisterWorker); its exit
    // report is awaited until kMissingRankGrace after. InfinitePast = not missing.
    absl::Time missing_since = absl::InfinitePast();
  };
  struct JobEntry {
    int64_t id = 0;  // numeric part of job.id
    mt::v1::Job job;
    uint64_t version = 1;
    std::optional<mt::v1::JobEvent> last_event;
    std::vector<RankState> ranks;  // for the current attempt
    // While RESTARTING: the failure that started the restart, and since when.
    std::string restart_cause;
    absl::Time restart_since = absl::InfinitePast();
    // Hang and straggler detection of the current attempt, from its placement.
    std::unique_ptr<HangDetector> hang;
    std::unique_ptr<StragglerTracker> stragglers;
    // The step of the last failed save counted (-1: none), so that each rank's report of the
    // same failure counts once.
    int64_t failed_save_step = -1;
    // A generation job's text, until released (job_manager_generate.cc).
    std::vector<mt::v1::GeneratedText> generated;
    int64_t generated_bytes = 0;
    bool generated_released = false;
    // Set by Cancel while the cancelled attempt's ranks stop: whether they were asked to save.
    std::optional<bool> cancel_saves;
  };

  JobManager(Store* store, WorkerRegistry* registry, const Clock* clock, JobManagerOptions options)
      : store_(store),
        registry_(registry),
        clock_(clock),
        options_(std::move(options)),
        scheduler_(registry) {}

  absl::StatusOr<JobEntry*> Find(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At start-up: the rendezvous keys an earlier coordinator kept for attempts still holding
  // ranks go back into rendezvous_ (the others are removed), which keeps every later write.
  absl::Status RestoreRendezvous() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a job to `to` with `reason`, persisting job and event together.
  absl::Status Transition(JobEntry* entry, mt::v1::JobState to, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Persist(JobEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps the scheduler's queue, placed_ and state_counts_ in step with a job whose state moves
  // from `from` to `to` (from = UNSPECIFIED for a job new to memory).
  void Reindex(const JobEntry& entry, mt::v1::JobState from, mt::v1::JobState to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PlacementTarget: the scheduler's decisions, recorded. Called from ScheduleLocked only, so
  // with mu_ held (each asserts it).
  const mt::v1::Job& PendingJob(int64_t id) override;
  void OnUnplannable(int64_t id, const absl::Status& error) override;
  void OnWaiting(int64_t id, const std::string& reason) override;
  absl::Status OnPlaced(int64_t id, const mt::v1::PlanJobResponse& plan) override;
  // The assign commands for every rank of a job just placed.
  void SendAssignments(const mt::v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The assign command of rank `rank` of `job`'s current placement.
  mt::v1::WorkerCommand AssignCommand(const mt::v1::Job& job, int rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // job_manager_reconnect.cc: RegisterWorker's two halves, and whether `worker_id` holds a rank
  // of the job's current attempt that has not ended.
  void StopUnexpectedRanks(const mt::v1::Worker& worker,
                           const std::vector<mt::v1::RunningRank>& running)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KeepPlacedRanks(const mt::v1::Worker& worker,
                       const std::vector<mt::v1::RunningRank>& running)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static bool HoldsLiveRank(const JobEntry& entry, const std::string& worker_id);
  // Sends a stop to every rank of the job's current attempt still running and frees workers
  // whose ranks already ended.
  // Sends a StopOrder to every rank still running: SIGTERM, SIGKILL after `grace_seconds`
  // (0 = stop_grace_seconds); `no_save` = SIGKILL at once.
  void StopRanks(JobEntry* entry, const std::string& reason, int grace_seconds = 0,
                 bool no_save = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a cancel, once every rank has exited: an event naming the step saved (or not).
  void RecordCancelOutcome(JobEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank of a SCHEDULED or RUNNING job failed (`cause`): RESTARTING with the other ranks
  // stopped, or FAILED (restart_policy.h DecideOnFailure). No-op in any other state.
  absl::Status FailOrRestart(JobEntry* entry, const std::string& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when `attempt` is the job's current one and the job has not ended.
  absl::Status CheckAttemptLive(const std::string& job_id, int attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(const std::string& worker_id, mt::v1::WorkerCommand command)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseWorker(const std::string& worker_id, const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rank whose progress speaks for the job: last pipeline stage, tp = cp = dp = 0.
  static int ReporterRank(const mt::v1::Layout& layout);
  int64_t QueuePosition(const JobEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // job_manager_health.cc: a new attempt's detectors; a beacon; the hang check of one job.
  void StartHealth(JobEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnBeacon(JobEntry* entry, const mt::v1::RankReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CheckHang(JobEntry* entry, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cause of a restart for a hung rank of a RUNNING job (`p99`: its p99 step time), and
  // for one that did not reach training (job SCHEDULED).
  static std::string HangCause(const JobEntry& entry, const Stall& h, absl::Duration p99);
  static std::string StartupHangCause(const JobEntry& entry, const Stall& h);
  // Appends an event to the job's log without a change of state (e.g. a checkpoint skipped).
  absl::Status RecordEvent(JobEntry* entry, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps a generation job's text for its stream (job_manager_generate.cc).
  void AppendGenerated(JobEntry* entry, const mt::v1::RankReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Delete's checks and the store and count updates; the caller erases the entry.
  absl::Status DeleteLocked(JobEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;
  WorkerRegistry* const registry_;
  const Clock* const clock_;
  const JobManagerOptions options_;

  absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::string coordinator_address_ ABSL_GUARDED_BY(mu_);
  // Ordered by numeric id.
  std::map<int64_t, std::unique_ptr<JobEntry>> jobs_ ABSL_GUARDED_BY(mu_);
  // The PENDING jobs' order and the placement pass.
  Scheduler scheduler_ ABSL_GUARDED_BY(mu_);
  // Jobs that hold or are stopping ranks (SCHEDULED, RUNNING, RESTARTING), by id.
  std::set<int64_t> placed_ ABSL_GUARDED_BY(mu_);
  // Jobs in each state (states with none are absent).
  std::map<mt::v1::JobState, int> state_counts_ ABSL_GUARDED_BY(mu_);
  int64_t hangs_detected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t save_failures_ ABSL_GUARDED_BY(mu_) = 0;
  // Thread-safe on their own; pushed to and dropped from under mu_ so that they follow the
  // jobs' order of events.
  WorkerMailboxes mailboxes_;
  RendezvousStore rendezvous_;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOBS_JOB_MANAGER_H_
