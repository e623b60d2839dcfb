// Saving and loading a rank's training state (FORMAT.md).
//
// Save, on every rank of the job at the same step:
//   1. snapshot: the rank's tensors (trainer_state.h) copied into one host buffer, pinned when
//      they live on a GPU and kept for the next save. A sync save waits for the copies; an
//      async save from a GPU queues them on a CUDA stream of their own, so that they run
//      during the next step's forward and backward, and hands the optimizer a fence
//      (MixedPrecisionOptimizer::AddUpdateFence): the next update waits for the copies on the
//      device, the training thread never does (it waits only for the state to be collected
//      and the copies queued);
//   2. the first DP replica of each (TP, PP) position writes its shard into
//      <save>/.partial-iter_<step>-a<attempt>/, split into files of at most max_file_bytes,
//      written and hashed in one pass, the files in parallel (temporary names, fsync, rename);
//      the other DP ranks hold identical tensors and write nothing (Megatron does the same);
//   3. every rank publishes its result (files, sizes, SHA-256s, or the error) through a
//      SaveExchange; rank 0 gathers all of them, writes manifest.json, renames the directory to
//      iter_<step> and only then replaces `latest` (checkpoint_dir.h CommitCheckpoint). A rank
//      that failed (a full disk) makes rank 0 drop the partial directory: the previous
//      checkpoint and `latest` stay as they were.
// Async save (--async-save): steps 2-3 run on a background thread after the snapshot; at most
// one save is in flight (the next Save waits for it).
//
// Load (ChooseLoad + OpenLoadSource): every file of the chosen checkpoint is read once, in
// parallel, and checked against the manifest; the loading rank's own files stay in memory and
// the restore reads them from there (the bytes restored are the bytes verified). A damaged
// checkpoint makes the choice fall back to the previous good one.
//
// Thread-compatible: one training thread calls Save/Wait/TakeFinished.
#ifndef MT_WORKER_CHECKPOINT_CHECKPOINTER_H_
#define MT_WORKER_CHECKPOINT_CHECKPOINTER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "mt/v1/checkpoint.pb.h"
#include "mt/v1/job.pb.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/checkpoint/trainer_state.h"
#include "worker/engine/trainer.h"

namespace mt::checkpoint {

// How the ranks of a save tell rank 0 what they wrote. Implementations: LocalExchange (one
// process; tests with one thread per rank) and StoreExchange (the job's own store,
// store_exchange.h).
// Thread-safe.
class SaveExchange {
 public:
  virtual ~SaveExchange() = default;
  virtual absl::Status Publish(int64_t step, int rank, const std::string& result) = 0;
  // Every rank's result of save `step`, by rank; DEADLINE_EXCEEDED naming the missing ranks.
  virtual absl::StatusOr<std::vector<std::string>> Gather(int64_t step, int world_size,
                                                          absl::Duration timeout) = 0;
};

class LocalExchange : public SaveExchange {
 public:
  absl::Status Publish(int64_t step, int rank, const std::string& result) override;
  absl::StatusOr<std::vector<std::string>> Gather(int64_t step, int world_size,
                                                  absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  std::map<std::pair<int64_t, int>, std::string> results_ ABSL_GUARDED_BY(mu_);
};

struct CheckpointerOptions {
  std::string save_dir;
  bool async_save = false;
  std::string job_id;
  int attempt = 0;
  mt::v1::JobSpec spec;
  mt::v1::Layout layout;  // world_size and sizes; a world of one when unset
  mt::v1::RankCoordinates coordinates;
  // How long rank 0 waits for the others' results.
  absl::Duration gather_timeout = absl::Minutes(30);
  // A rank's shard is split into files of at most this many data bytes (a larger tensor gets
  // a file of its own), written in parallel: SHA-256 is slower than a fast disk on one core.
  // Shards over 64 MiB are also split into at least one file per I/O thread.
  int64_t max_file_bytes = int64_t{256} << 20;
  int io_threads = 0;  // 0 = DefaultIoThreads()
  // Nice increment of an async save's background threads (the writer and its I/O threads,
  // which inherit it), so that serialising, hashing and writing yield the CPU to the training
  // thread where cores are short; 0 = as the trainer.
  int background_nice = 10;
  // Async saves from a GPU: the snapshot's copies overlap the next step (the file comment);
  // false = the training thread waits for them, as in a sync save (checkpoint_bench compares).
  bool overlap_snapshot = true;
};

// One finished save as this rank saw it.
struct SaveInfo {
  int64_t step = 0;
  std::string directory;        // iter_<step> (committed by rank 0)
  int64_t bytes = 0;            // what this rank wrote
  double seconds = 0;           // snapshot to done
  double snapshot_seconds = 0;  // what the training thread waited for (async saves)
  int files = 0;                // this rank's files
  bool committed = false;       // rank 0 only: the manifest and `latest` are written
  absl::Status status;
};

class Checkpointer {
 public:
  // `exchange` outlives the checkpointer. Creates save_dir when missing.
  static absl::StatusOr<std::unique_ptr<Checkpointer>> Create(CheckpointerOptions options,
                                                              SaveExchange* exchange);
  ~Checkpointer();  // waits for a save in flight

  // Saves the trainer's state at its current iteration. Sync: returns when this rank's part
  // is done (rank 0: committed). Async: returns after the snapshot; the result arrives
  // through Wait / TakeFinished. Waits for a previous async save first. A second save of the
  // same step is skipped (OK). A NaN `loss` (the step's loss was not read back: not a log
  // step) is read from the trainer (Trainer::LastStepLoss, a DP collective: every rank saves).
  absl::Status Save(engine::Trainer& trainer, double loss, double validation_loss);
  // Allocates the host buffer the saves copy the state into (pinned for a GPU trainer: slow to
  // allocate) now, at start-up, rather than in the first save. Optional; every rank calls it
  // (with the distributed optimizer it gathers the state once, as a save does).
  absl::Status Prepare(engine::Trainer& trainer);
  // Waits for the save in flight, if any.
  void Wait();
  // Saves finished since the last call (sync and async), oldest first.
  std::vector<SaveInfo> TakeFinished();
  int64_t last_saved_step() const { return last_step_; }

 private:
  Checkpointer(CheckpointerOptions options, SaveExchange* exchange);
  struct Snapshot;
  // Lays the state out in the host buffer (allocated when missing or too small) and, with
  // `copy`, copies it there; with `overlap` (async saves) the copies from a GPU may still be
  // running on return (Snapshot::wait_copies and fence).
  absl::Status TakeSnapshot(const std::vector<StateTensor>& tensors, Snapshot& s, bool copy,
                            bool overlap);
  SaveInfo Write(Snapshot& snapshot);

  CheckpointerOptions options_;
  SaveExchange* exchange_;
  int rank_ = 0;
  int world_ = 1;
  bool writes_shard_ = true;
  int64_t last_step_ = -1;
  // The host copy of the state; its buffer is reused by the next save (free again once the
  // save in flight is done).
  std::shared_ptr<Snapshot> snapshot_;
  std::thread worker_;
  absl::Mutex mu_;
  std::vector<SaveInfo> finished_ ABSL_GUARDED_BY(mu_);
};

// Where the loading rank sits, so that its own files are kept in memory by the verification
// (only when the checkpoint was written under the same TP and PP sizes; a resharding load
// reads what it needs from the files).
struct LoadOptions {
  bool keep_own_files = false;  // for OpenLoadSource; else nothing is kept
  int tp_rank = 0;
  int pp_rank = 0;
  int tp_size = 1;
  int pp_size = 1;
  int io_threads = 0;  // 0 = DefaultIoThreads()
  int64_t max_keep_bytes = int64_t{32} << 30;
  // With keep_own_files: the kept files are also copied, block by block as they are read, to
  // this device (StagedFiles, trainer_state.h), so that the copies to the GPU overlap the
  // reading and the restore copies device to device. Nothing of it is used unless the
  // checkpoint verifies (a damaged one's copies are dropped with it). "auto" = cuda:0 when
  // CUDA is available (a rank's GPU: the daemon sets CUDA_VISIBLE_DEVICES), else none; "" =
  // none; or a device ("cuda:1"; "cpu" exercises the path in tests).
  std::string stage_device = "auto";
  // Files beyond this many bytes on the device are restored from host memory instead (the
  // copies exist next to the trainer's state until the restore is done).
  int64_t max_stage_bytes = int64_t{16} << 30;
};

// What --load (or a restart's resume_from) names: a save directory (its latest loadable
// checkpoint, falling back past damaged ones), a checkpoint directory, or a Hugging Face
// GPT-2 directory. std::nullopt when `path` holds no checkpoint at all (a fresh run).
absl::StatusOr<std::optional<LoadChoice>> ChooseLoad(const std::string& path,
                                                     const LoadOptions& options = {});
// The tensors of a choice, from the files it kept in memory where it did, and from their staged
// device copies where it made them (release the choice's `files`, `attachment` and the source
// after the restore).
absl::StatusOr<std::unique_ptr<TensorSource>> OpenLoadSource(const LoadChoice& choice);

}  // namespace mt::checkpoint

#endif  // MT_WORKER_CHECKPOINT_CHECKPOINTER_H_
