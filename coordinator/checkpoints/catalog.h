// The coordinator's checkpoint catalog: every checkpoint a job saved (registered from the
// ranks' RankReport.checkpoint) or a user imported, with its files, checksums and state, and
// the operations of the ClientService checkpoint RPCs on it. Entries live in the Store
// (table `checkpoints`); the files live on the shared file system (worker/checkpoint/FORMAT.md).
//
// States (mt.v1.CheckpointState; the allowed moves are checkpoint_state.h) and what moves them:
//   (none) -> WRITING     a rank reported a save whose manifest rank 0 has not committed yet
//   WRITING -> COMPLETE   a report found the committed manifest (rank 0 reports after it)
//   WRITING -> DELETED    a later save of the same directory committed and this one never did
//   COMPLETE|VERIFIED|CORRUPT -> VERIFIED|CORRUPT   Verify re-hashed every file
//   any but WRITING -> DELETED   Delete, or retention after a registration
//   WRITING -> DELETED    Delete, once its job has ended (a save that never committed)
//   WRITING -> COMPLETE -> VERIFIED|CORRUPT, or WRITING -> DELETED   ResolveStaleWriting, once
//                         the save is settled (its job ended, or `latest` reached its step)
// A report of a save that has not committed and is already settled registers nothing.
// Imports enter as VERIFIED (they are hashed when imported).
//
// Guards: `latest` of a save directory (is_latest, from latest_checkpointed_iteration.txt) is
// never removed by retention, and not by Delete while its job is active; a checkpoint that an
// active job loads (spec load_dir is its directory, or its save directory when it is the
// latest there) is never removed. Deleting the latest of an ended job points `latest` at the
// newest remaining checkpoint (or removes the pointer when none is left).
//
// Deleting removes a job checkpoint's directory; an imported entry's directory is the user's,
// so only its listed files (and manifest.json) go, and the directory when it is then empty.
// Downloads send only regular files inside the checkpoint directory (no symbolic links out).
//
// Every path a client gives is checked here (INVALID_ARGUMENT naming the field): absolute, no
// ".." component, no NUL; and, with allowed roots, resolved into one of them (PERMISSION_DENIED).
// An import refuses files that lead outside its directory (symbolic links) and an mt manifest
// whose tensors contradict its shards' headers. Entries with format_version 0 are Hugging Face
// directories (no mt manifest; config.json + model.safetensors are their files).
//
// Thread-safe: one mutex serializes changes to entries; hashing (Verify) and streaming
// (Download) run outside it.
#ifndef MT_COORDINATOR_CHECKPOINTS_CATALOG_H_
#define MT_COORDINATOR_CHECKPOINTS_CATALOG_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/base/confine.h"
#include "coordinator/store/store.h"
#include "mt/v1/checkpoint.pb.h"
#include "mt/v1/client_service.pb.h"
#include "mt/v1/worker_service.pb.h"

namespace mt::coordinator {

// What the catalog needs to know of jobs. A narrow interface onto the JobManager
// (JobManagerCheckpointJobs in job_lookup.h); tests give a fake.
class CheckpointJobs {
 public:
  struct Active {
    std::string job_id;
    mt::v1::JobState state = mt::v1::JOB_STATE_UNSPECIFIED;
    std::string load_dir;
    std::string save_dir;
  };
  virtual ~CheckpointJobs() = default;
  // Jobs not in a terminal state.
  virtual std::vector<Active> ActiveJobs() = 0;
  virtual absl::StatusOr<mt::v1::Job> GetJob(const std::string& job_id) = 0;
};

// An absolute path without ".." components or NUL bytes (at most 4096 bytes).
// INVALID_ARGUMENT naming `field` otherwise.
absl::Status ValidateAbsolutePath(const std::string& path, const std::string& field);

class CheckpointCatalog {
 public:
  // `store`, `jobs` and `clock` outlive the catalog. Import and export directories must
  // resolve into `roots` (none = anywhere).
  static absl::StatusOr<std::unique_ptr<CheckpointCatalog>> Create(Store* store,
                                                                   CheckpointJobs* jobs,
                                                                   const Clock* clock,
                                                                   AllowedRoots roots = {});

  // A rank reported a finished save (report.checkpoint set). Registers or completes the entry,
  // updates `latest`, then runs the job's retention policy. Returns the entry.
  absl::StatusOr<mt::v1::Checkpoint> OnCheckpointReport(const mt::v1::RankReport& report);

  // Settles WRITING entries whose save can no longer commit (their job ended or is unknown, or
  // their step is not past the save directory's `latest`): a committed manifest completes the
  // entry and its files are hashed (VERIFIED or CORRUPT); otherwise it becomes DELETED and its
  // partial files are removed. Returns how many entries it settled. The server runs it
  // periodically; it hashes outside the lock.
  int ResolveStaleWriting();

  absl::StatusOr<mt::v1::ListCheckpointsResponse> List(
      const mt::v1::ListCheckpointsRequest& request);
  absl::StatusOr<mt::v1::Checkpoint> Get(const std::string& checkpoint_id);
  absl::StatusOr<mt::v1::Checkpoint> Delete(const std::string& checkpoint_id);
  absl::StatusOr<mt::v1::VerifyCheckpointResponse> Verify(const std::string& checkpoint_id);
  // Calls `write` with each chunk in order (manifest.json first for mt checkpoints); `write`
  // returns false when the client went away (CANCELLED then).
  absl::Status Download(const mt::v1::DownloadCheckpointRequest& request,
                        const std::function<bool(const mt::v1::DownloadCheckpointChunk&)>& write);
  absl::StatusOr<mt::v1::ExportCheckpointResponse> Export(
      const mt::v1::ExportCheckpointRequest& request);
  absl::StatusOr<mt::v1::Checkpoint> Import(const mt::v1::ImportCheckpointRequest& request);

  // --- Evaluation and generation jobs (catalog_inference.cc) ------------------------------
  // What an eval or generation job loads for `checkpoint` (`mtctl eval|generate CHECKPOINT`):
  // a catalog id (NOT_FOUND naming it; FAILED_PRECONDITION unless COMPLETE or VERIFIED), or an
  // absolute directory inside the allowed roots: a checkpoint, or a save directory's latest
  // good one (NOT_FOUND when it holds none). No file is hashed here (the rank verifies).
  struct LoadTarget {
    std::string checkpoint_id;  // empty when the directory is not in the catalog
    std::string directory;
    mt::v1::CheckpointManifest manifest;
  };
  absl::StatusOr<LoadTarget> ResolveForLoad(const std::string& checkpoint);
  // Appends the result of a SUCCEEDED eval job (Job.progress) to its checkpoint's
  // `evaluations` (the newest kMaxEvaluations kept). OK and nothing written when the
  // checkpoint is not in the catalog.
  absl::Status RecordEvaluation(const mt::v1::Job& job);
  static constexpr int kMaxEvaluations = 32;

 private:
  CheckpointCatalog(Store* store, CheckpointJobs* jobs, const Clock* clock, AllowedRoots roots)
      : store_(store), jobs_(jobs), clock_(clock), roots_(std::move(roots)) {}

  // OnCheckpointReport's parts. A WRITING entry for a save not committed yet.
  absl::StatusOr<mt::v1::Checkpoint> CreateWritingLocked(const mt::v1::Job& job,
                                                         const mt::v1::CheckpointReport& r,
                                                         const std::string& dir)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers (or completes, when `known`) the entry of a committed checkpoint directory.
  absl::StatusOr<mt::v1::Checkpoint> UpsertCommittedLocked(
      const mt::v1::Job& job, const mt::v1::CheckpointManifest& m, const std::string& dir,
      const std::optional<mt::v1::Checkpoint>& known) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Saves of the job in `save_dir` whose rank-0 report never arrived (the coordinator was
  // down, say), registered from their manifests.
  absl::Status RegisterMissedSavesLocked(const mt::v1::Job& job, const std::string& save_dir,
                                         int64_t reported_step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // WRITING entries of steps before `committed_step` that never committed will not: rank 0
  // removed their partial files. They become DELETED.
  absl::Status RetireAbandonedWritingLocked(const std::string& job_id, const std::string& save_dir,
                                            int64_t committed_step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // loading_job_ids from the active jobs.
  void Fill(mt::v1::Checkpoint* c, const std::vector<CheckpointJobs::Active>& active) const;
  // Sets is_latest on the job's entries in `save_dir` from the `latest` pointer.
  absl::Status RefreshLatestLocked(const std::string& job_id, const std::string& save_dir)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the files and records DELETED; repoints `latest` when it was the latest.
  absl::Status RemoveLocked(mt::v1::Checkpoint* c, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One WRITING entry of a settled save (ResolveStaleWriting): true when it was completed from
  // its manifest (to be verified), false when it was DELETED.
  absl::StatusOr<bool> SettleWritingLocked(mt::v1::Checkpoint* c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ApplyRetentionLocked(const mt::v1::Job& job, const std::string& save_dir)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;
  CheckpointJobs* const jobs_;
  const Clock* const clock_;
  const AllowedRoots roots_;
  absl::Mutex mu_;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_CHECKPOINTS_CATALOG_H_
