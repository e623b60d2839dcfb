// The coordinator's view of its worker daemons.
//
// Worker states (mt.v1.WorkerState); allowed transitions, all in this file:
//   (new) -> IDLE                    Register
//   IDLE <-> BUSY                    Assign / Release
//   IDLE | BUSY -> DRAINING          Drain (a draining worker takes no new work)
//   IDLE | BUSY | DRAINING -> LOST   SweepLost, after `lost_after` without a heartbeat
//   LOST | GONE -> IDLE              Register again with the same id (reconnect)
//   any -> GONE                      Deregister
//
// Identity: a new worker gets an id and a credential (a random secret, returned once; only its
// SHA-256 is kept). Re-registering a known id must present the credential (PERMISSION_DENIED
// otherwise). Each registration also gets a session, which every later call of the daemon
// carries (Authenticate). A known worker that is live (IDLE/BUSY/DRAINING with a heartbeat
// within lost_after) accepts a registration only with its current session (or the one before,
// when the answer to the daemon's last Register was lost): a second daemon holding a copy of
// the state file is refused (ALREADY_EXISTS) while the first one is connected. A genuine restart of
// the daemon (a new process, no session) is accepted once the old process's heartbeats have stopped
// for lost_after, i.e. when the worker would be LOST. With a Store (Persist), every id issued
// and the SHA-256 of its credential are kept in SQLite: after a coordinator restart a daemon
// re-registering keeps its id by proving its credential (a wrong one is refused), and ids are
// never issued twice. An id the store does not know (a database from before identities were
// kept, or no store) is adopted with the credential it presents, counted against kMaxWorkers
// like a new one, and kept from then on. Thread-safe: every method takes the registry's mutex;
// the store's own mutex is taken inside it (a leaf).
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
#include "coordinator/store/store.h"
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
  // Largest worker id issued or adopted (ids are never reused; far from int64 overflow).
  static constexpr int64_t kMaxWorkerId = 1'000'000'000'000;

  // The secrets of one registration, handed to the daemon once.
  struct Issued {
    std::string credential;  // empty unless a new credential was issued
    std::string session;
  };

  WorkerRegistry(const Clock* clock, absl::Duration lost_after);

  // Loads the identities `store` keeps and records every later one there. Call once, before
  // the first Register; `store` outlives the registry.
  absl::Status Persist(Store* store);

  // Registers a new worker (empty request.worker_id) or re-registers a known one (see
  // Identity above). Returns the stored worker; `issued` (optional) receives its secrets.
  // INVALID_ARGUMENT names a bad field; PERMISSION_DENIED / ALREADY_EXISTS name the id.
  absl::StatusOr<mt::v1::Worker> Register(const mt::v1::RegisterRequest& request,
                                          Issued* issued = nullptr);
  // OK when `session` is the current session of `worker_id`; NOT_FOUND for an unknown id,
  // PERMISSION_DENIED naming the id otherwise.
  absl::Status Authenticate(const std::string& worker_id, const std::string& session) const;
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
  // SHA-256 digests of each worker's credential, current session and the one before it (a
  // daemon whose Register answer was lost still holds that one and may present it).
  struct SecretHashes {
    std::string credential;
    std::string session;
    std::string previous_session;
  };
  absl::btree_map<int64_t, SecretHashes> secrets_ ABSL_GUARDED_BY(mu_);
  Store* store_ ABSL_GUARDED_BY(mu_) = nullptr;  // optional (Persist)

  // The id a registration gets, after checking its proof of identity (see Identity above).
  // Keeps `id`'s credential digest in the store (when there is one); UNAVAILABLE if it cannot.
  absl::Status RecordIdentity(int64_t id, const std::string& credential_sha256)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> ClaimId(const mt::v1::RegisterRequest& request, absl::Time now,
                                  std::string* credential) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

// "w-12" -> 12 (1..kMaxWorkerId); error naming the field otherwise.
absl::StatusOr<int64_t> ParseWorkerId(const std::string& id);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_WORKERS_REGISTRY_H_
