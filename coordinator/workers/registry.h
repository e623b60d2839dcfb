// The coordinator's view of its worker daemons.
//
// Worker states (mt.v1.WorkerState); allowed transitions, all in this file:
//   (new) -> IDLE                    Register
//   IDLE <-> BUSY                    Assign / Release
//   IDLE | BUSY -> DRAINING          Drain (a draining worker takes no new work)
//   IDLE | BUSY | DRAINING -> LOST   SweepLost, after `lost_after` without a heartbeat
//   LOST | GONE -> IDLE              Register again with the same id (reconnect)
//   any -> GONE                      Deregister
// Thread-safe: every method takes the registry's mutex.
#ifndef MT_COORDINATOR_WORKERS_REGISTRY_H_
#define MT_COORDINATOR_WORKERS_REGISTRY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "coordinator/scheduler/worker_pool.h"
#include "mt/v1/worker_service.pb.h"

namespace mt::coordinator {

struct WorkerCounts {
  int total = 0;
  int idle = 0;
  int busy = 0;
  int draining = 0;
  int lost = 0;
  int gone = 0;
};

class WorkerRegistry : public WorkerPool {
 public:
  // Limits checked at the boundary.
  static constexpr int kMaxWorkers = 100'000;
  static constexpr size_t kMaxNameBytes = 253;

  WorkerRegistry(const Clock* clock, absl::Duration lost_after);

  // Registers a new worker (empty request.worker_id) or re-registers a known one. Returns
  // the stored worker. INVALID_ARGUMENT names a bad resource field.
  absl::StatusOr<mt::v1::Worker> Register(const mt::v1::RegisterRequest& request);
  // NOT_FOUND when the id is unknown or the worker was declared LOST/GONE: it must register.
  absl::Status Heartbeat(const std::string& worker_id);
  absl::Status Deregister(const std::string& worker_id);
  absl::StatusOr<mt::v1::Worker> Drain(const std::string& worker_id);
  absl::StatusOr<mt::v1::Worker> Get(const std::string& worker_id) const;
  // IDLE -> BUSY running `rank` of `job_id`. FAILED_PRECONDITION unless IDLE.
  absl::Status Assign(const std::string& worker_id, const std::string& job_id, int rank) override;
  // BUSY with `job_id` -> IDLE (a DRAINING worker stays DRAINING, its job cleared). A worker
  // that moved on to another job is left alone.
  void Release(const std::string& worker_id, const std::string& job_id) override;
  // Workers in id order; `states` empty = every state.
  std::vector<mt::v1::Worker> List(const std::vector<mt::v1::WorkerState>& states,
                                   const std::string& node) const;
  // Declares LOST every live worker silent for longer than lost_after; returns their ids.
  std::vector<std::string> SweepLost();
  WorkerCounts Counts() const;
  // The same counts per node (for the metrics' node label).
  std::map<std::string, WorkerCounts> CountsByNode() const;

  // What the scheduler places jobs on (WorkerPool), read under one lock.
  using Capacity = WorkerCapacity;
  Capacity SnapshotCapacity() const override;
  // Changes whenever a worker's state, job or resources change (register, assign, release,
  // drain, lost, deregister); heartbeats leave it alone. Equal versions mean equal capacity,
  // so a placement computed at one version holds until the version moves. Starts at 1.
  uint64_t capacity_version() const override;
  absl::Duration lost_after() const { return lost_after_; }

 private:
  const Clock* clock_;
  const absl::Duration lost_after_;
  mutable absl::Mutex mu_;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 1;
  // Ordered by numeric id so listings are stable.
  absl::btree_map<int64_t, mt::v1::Worker> workers_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<int64_t, absl::Time> last_seen_ ABSL_GUARDED_BY(mu_);
};

// "w-12" -> 12; error naming the field otherwise.
absl::StatusOr<int64_t> ParseWorkerId(const std::string& id);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_WORKERS_REGISTRY_H_
