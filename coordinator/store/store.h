// The coordinator's durable state: jobs, their event logs, and workers, in an embedded SQLite
// database under --state-dir. A coordinator restart loses nothing.
//
// Schema (versioned; store.cc holds the migrations, applied in order at Open):
//   meta(key, value)                          schema_version, max_deleted_job_id,
//                                             rank_credential_key (GetOrPutMeta)
//   jobs(id, request_id, name, state, priority, create_ns, job)   job = mt.v1.Job bytes
//   job_events(job_id, seq, time_ns, state, attempt, reason)
//   workers(id, worker)                       worker = mt.v1.Worker bytes
//   checkpoints(id, job_id, step, directory, state, create_ns, checkpoint)
//                                             checkpoint = mt.v1.Checkpoint bytes (v2)
//   worker_identities(id, credential_sha256)  the credential issued with w-<id> (v3)
//   rendezvous(job_id, attempt, key, value)   keys of live attempts, dropped with them (v3)
//   index checkpoints_by_state                entries by state (v4)
// Each write is one transaction; a job update and its event commit together or not at all.
// Thread-safe: one connection guarded by a mutex (SQLite in serialized use).
#ifndef MT_COORDINATOR_STORE_STORE_H_
#define MT_COORDINATOR_STORE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "mt/v1/checkpoint.pb.h"
#include "mt/v1/job.pb.h"

struct sqlite3;

namespace mt::coordinator {

class Store {
 public:
  static constexpr int kSchemaVersion = 4;
  // SQLite's page cache of the connection, at most (store.cc says why).
  static constexpr int kPageCacheKiB = 512;

  // Opens (creating when needed) <state_dir>/coordinator.db and migrates it to kSchemaVersion.
  // A database from a newer mt is refused (FAILED_PRECONDITION) rather than touched.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& state_dir);
  ~Store();

  // Inserts a new job and its first event; fills job.id ("j-<n>"). When request_id is not
  // empty and a job with it exists, returns that job instead (an idempotent retry).
  absl::StatusOr<mt::v1::Job> CreateJob(mt::v1::Job job, const std::string& request_id,
                                        const mt::v1::JobEvent& first_event);
  // The job created with `request_id`; nullopt when none (or request_id is empty).
  absl::StatusOr<std::optional<mt::v1::Job>> FindByRequestId(const std::string& request_id);
  // Replaces the stored job, appending `event` (when given) to its log, in one transaction.
  absl::Status UpdateJob(const mt::v1::Job& job, const std::optional<mt::v1::JobEvent>& event);
  absl::StatusOr<mt::v1::Job> GetJob(const std::string& job_id);
  // Removes a job and its events; its id is never issued again. NOT_FOUND when unknown.
  absl::Status DeleteJob(const std::string& job_id);
  absl::StatusOr<std::vector<mt::v1::JobEvent>> Events(const std::string& job_id);
  // Every job, oldest first (the coordinator keeps them in memory after start-up).
  absl::StatusOr<std::vector<mt::v1::Job>> AllJobs();

  absl::Status PutWorker(const mt::v1::Worker& worker);
  absl::StatusOr<std::vector<mt::v1::Worker>> AllWorkers();

  // --- Worker identities (coordinator/workers/registry.h owns the rules) -------------------
  struct WorkerIdentity {
    int64_t id = 0;                 // w-<id>
    std::string credential_sha256;  // hex SHA-256 of the credential issued with the id
  };
  absl::Status PutWorkerIdentity(int64_t id, const std::string& credential_sha256);
  absl::StatusOr<std::vector<WorkerIdentity>> AllWorkerIdentities();

  // --- Rendezvous keys (coordinator/rendezvous/rendezvous_store.h owns the rules) ----------
  struct RendezvousKey {
    std::string job_id;
    int attempt = 0;
    std::string key;
    std::string value;
  };
  absl::Status PutRendezvousKey(const std::string& job_id, int attempt, const std::string& key,
                                const std::string& value);
  absl::Status DropRendezvousSpace(const std::string& job_id, int attempt);
  absl::StatusOr<std::vector<RendezvousKey>> AllRendezvousKeys();

  // --- Checkpoint catalog (coordinator/checkpoints/catalog.h owns the rules) ---------------
  // Inserts a new entry and fills its id ("c-<n>").
  absl::StatusOr<mt::v1::Checkpoint> CreateCheckpoint(mt::v1::Checkpoint checkpoint);
  // Replaces a stored entry (NOT_FOUND when there is none with its id).
  absl::Status UpdateCheckpoint(const mt::v1::Checkpoint& checkpoint);
  absl::StatusOr<mt::v1::Checkpoint> GetCheckpoint(const std::string& checkpoint_id);
  // Entries filed under `job_id` ("" = every entry), oldest first.
  absl::StatusOr<std::vector<mt::v1::Checkpoint>> ListCheckpoints(const std::string& job_id);
  // Entries in `state`, oldest first; reads those rows only (an index), so that a periodic
  // pass over a few entries costs nothing in proportion to the whole catalog.
  absl::StatusOr<std::vector<mt::v1::Checkpoint>> ListCheckpointsInState(
      mt::v1::CheckpointState state);
  // The newest entry for `directory` that is not DELETED, if any.
  absl::StatusOr<std::optional<mt::v1::Checkpoint>> FindCheckpointByDirectory(
      const std::string& directory);

  // --- Coordinator settings in meta (no schema change: meta holds any key) ----------------
  // The value stored under `key`; when there is none, stores `value_if_absent` and returns it
  // (in one transaction, so concurrent callers get the same value). Keys the store uses itself
  // (schema_version, max_deleted_job_id) are refused.
  absl::StatusOr<std::string> GetOrPutMeta(const std::string& key,
                                           const std::string& value_if_absent);

  int schema_version() const { return kSchemaVersion; }

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  absl::Status Exec(const std::string& sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::optional<mt::v1::Job>> FindByRequestIdLocked(const std::string& request_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Migrate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InsertEvent(int64_t job_id, const mt::v1::JobEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
};

// "j-12" -> 12; INVALID_ARGUMENT naming job_id otherwise.
absl::StatusOr<int64_t> ParseJobId(const std::string& id);
// "c-12" -> 12; INVALID_ARGUMENT naming checkpoint_id otherwise.
absl::StatusOr<int64_t> ParseCheckpointId(const std::string& id);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_STORE_STORE_H_
