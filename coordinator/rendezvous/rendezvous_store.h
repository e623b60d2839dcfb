// The rendezvous key-value store: one space of string keys per (job, attempt), through which
// the ranks of one attempt find each other (the NCCL/Gloo store of common/rpc's clients).
// Get waits for keys that are not there yet; Add is an atomic integer counter.
//
// A space starts empty on first use and is dropped (Drop) when its attempt ends, so a rank of
// an earlier attempt can never read a later attempt's keys. Whether an attempt may write is its
// owner's decision (JobManager checks the job's state first); this class only keeps the keys.
//
// With a Store (Persist), every write is also kept in SQLite (table `rendezvous`) before it is
// answered, and a dropped space is removed there: a coordinator restart between one rank's
// publish and another's read loses nothing (the reader's retries find the key in the restarted
// coordinator). Restore puts the kept keys of live attempts back at start-up.
//
// Thread-safe: one mutex guards every space; Get waits on it without blocking writers.
// Lock order: callers may hold their own lock while calling in (JobManager does); this class
// calls out only to the Store (a leaf: its own mutex, no callbacks) while holding its mutex.
#ifndef MT_COORDINATOR_RENDEZVOUS_RENDEZVOUS_STORE_H_
#define MT_COORDINATOR_RENDEZVOUS_RENDEZVOUS_STORE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/store/store.h"

namespace mt::coordinator {

class RendezvousStore {
 public:
  // Limits on what ranks may store: keys are short names, values small blobs (NCCL unique
  // ids, addresses); a space is bounded so a runaway job cannot exhaust the coordinator.
  static constexpr size_t kMaxKeyBytes = 256;
  static constexpr size_t kMaxValueBytes = 64 << 10;
  static constexpr size_t kMaxKeysPerSpace = 65536;
  static constexpr size_t kMaxKeysPerGet = 4096;

  // INVALID_ARGUMENT for a key or value out of bounds; checked before any job lookup.
  static absl::Status CheckKey(const std::string& key);
  static absl::Status CheckValue(const std::string& value);
  static absl::Status CheckKeys(const std::vector<std::string>& keys);

  // Stores `value` under `key` (replacing it). RESOURCE_EXHAUSTED when the space is full.
  absl::Status Set(const std::string& job_id, int attempt, const std::string& key,
                   const std::string& value);
  // The values of `keys`, in order, once all are there. DEADLINE_EXCEEDED naming the missing
  // keys after `timeout`, or at once after Shutdown.
  absl::StatusOr<std::vector<std::string>> Get(const std::string& job_id, int attempt,
                                               const std::vector<std::string>& keys,
                                               absl::Duration timeout);
  // Adds `delta` to the integer under `key` (absent = 0) and returns the sum.
  // FAILED_PRECONDITION when the key holds something else.
  absl::StatusOr<int64_t> Add(const std::string& job_id, int attempt, const std::string& key,
                              int64_t delta);
  // Forgets the space of (job, attempt); waiters on it time out.
  void Drop(const std::string& job_id, int attempt);
  // Keeps every later write in `store` (which outlives this object). Call before the first
  // write; Restore first to take back what an earlier coordinator kept.
  void Persist(Store* store);
  // Puts back a key kept by an earlier coordinator (at start-up, before Persist).
  void Restore(const Store::RendezvousKey& kept);
  // Wakes every waiter; later Gets of missing keys return at once.
  void Shutdown();

 private:
  using Space = absl::flat_hash_map<std::string, std::string>;
  static std::string SpaceKey(const std::string& job_id, int attempt);

  absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  Store* store_ ABSL_GUARDED_BY(mu_) = nullptr;  // optional (Persist)
  // By "job_id/attempt".
  absl::flat_hash_map<std::string, Space> spaces_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_RENDEZVOUS_RENDEZVOUS_STORE_H_
