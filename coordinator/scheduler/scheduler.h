// Gang scheduling of PENDING jobs: the placement pass.
//
// Order: priority (high first), then id (FIFO), from the PendingQueue index. A job is placed
// whole (every rank) or not at all, on IDLE workers, by coordinator/plan.h. A job that could
// fit on the cluster's live workers but not on the free ones blocks the jobs behind it (no
// backfilling, so large jobs are not starved); a job larger than the whole cluster waits
// without blocking others.
//
// Cost: the pass walks the index (no scan of every job), and a job already planned at the
// pool's current capacity version is not planned again (its placement cannot have changed),
// so a pass over a blocked queue costs O(log n) whatever its length.
//
// The scheduler decides; the job's owner (PlacementTarget, i.e. JobManager) records what was
// decided: it moves jobs between states and tells the scheduler (Enqueue/Dequeue) when a job
// enters or leaves PENDING, including from inside the target's callbacks.
//
// Thread-compatible: JobManager calls every method under its mutex, so that a pass and the
// store writes its callbacks make are ordered with every other job event.
#ifndef MT_COORDINATOR_SCHEDULER_SCHEDULER_H_
#define MT_COORDINATOR_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "coordinator/scheduler/pending_queue.h"
#include "coordinator/scheduler/worker_pool.h"
#include "mt/v1/client_service.pb.h"
#include "mt/v1/job.pb.h"

namespace mt::coordinator {

// What the pass asks of the owner of the jobs. Callbacks run inside Pass().
class PlacementTarget {
 public:
  virtual ~PlacementTarget() = default;
  // A queued job (its id and spec are what the pass reads).
  virtual const mt::v1::Job& PendingJob(int64_t id) = 0;
  // The spec cannot be planned at all (it was valid at submit): the job must leave PENDING.
  virtual void OnUnplannable(int64_t id, const absl::Status& error) = 0;
  // Not placeable on the free workers now; `reason` says why, for the user.
  virtual void OnWaiting(int64_t id, const std::string& reason) = 0;
  // Every worker of `plan` is claimed for the job: record the placement and leave PENDING.
  // An error gives the workers back and leaves the job queued.
  virtual absl::Status OnPlaced(int64_t id, const mt::v1::PlanJobResponse& plan) = 0;
};

class Scheduler {
 public:
  // `pool` outlives the scheduler.
  explicit Scheduler(WorkerPool* pool) : pool_(pool) {}

  // The job entered PENDING / left it (placed, failed, cancelled).
  void Enqueue(QueueKey key) { queue_.Add(key); }
  void Dequeue(QueueKey key);
  // Jobs ahead of a queued one.
  int64_t QueuePosition(QueueKey key) const { return queue_.Position(key); }
  int64_t queued() const { return queue_.size(); }

  // One placement pass over the queue.
  void Pass(PlacementTarget* target);

 private:
  // Claims every worker of `plan` for `job_id`, or none (false).
  bool Claim(const std::string& job_id, const mt::v1::PlanJobResponse& plan);
  void Unclaim(const std::string& job_id, const mt::v1::PlanJobResponse& plan);

  // The capacity version at which a pass last found a queued job unplaceable, and whether it
  // then blocked the jobs behind it. Forgotten when the job leaves the queue.
  struct Planned {
    uint64_t version = 0;
    bool blocks = false;
  };

  WorkerPool* const pool_;
  PendingQueue queue_;
  absl::flat_hash_map<int64_t, Planned> planned_;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_SCHEDULER_SCHEDULER_H_
