// What the scheduler needs of the workers: a consistent snapshot of the free ones, a version
// that moves whenever that capacity may have changed, and claiming/releasing a worker for one
// rank. WorkerRegistry (coordinator/workers/registry.h) is the real one; FakeWorkerPool
// (fake_worker_pool.h) the one for tests.
//
// Implementations are thread-safe: the scheduler calls them under its owner's lock, and the
// RPC handlers call the registry at the same time.
#ifndef MT_COORDINATOR_SCHEDULER_WORKER_POOL_H_
#define MT_COORDINATOR_SCHEDULER_WORKER_POOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "mt/v1/worker_service.pb.h"

namespace mt::coordinator {

// What jobs can be placed on, read at once: the IDLE workers in id order, the number of live
// (IDLE or BUSY) workers, and the capacity version they belong to.
struct WorkerCapacity {
  std::vector<mt::v1::Worker> idle;
  int live = 0;
  uint64_t version = 0;
};

class WorkerPool {
 public:
  virtual ~WorkerPool() = default;
  virtual WorkerCapacity SnapshotCapacity() const = 0;
  // Changes whenever the free capacity may have changed; equal versions mean equal capacity,
  // so a placement computed at one version holds until the version moves.
  virtual uint64_t capacity_version() const = 0;
  // IDLE -> BUSY running `rank` of `job_id`. FAILED_PRECONDITION unless IDLE.
  virtual absl::Status Assign(const std::string& worker_id, const std::string& job_id,
                              int rank) = 0;
  // Undoes Assign (a worker that moved on to another job is left alone).
  virtual void Release(const std::string& worker_id, const std::string& job_id) = 0;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_SCHEDULER_WORKER_POOL_H_
