// The on-disk layout of mt checkpoints (worker/checkpoint/FORMAT.md) and everything about it
// that needs no LibTorch: names, the manifest, the commit of a save, the `latest` pointer,
// verification and the choice of what to load (falling back past damaged checkpoints).
//
//   <save_dir>/latest_checkpointed_iteration.txt    "<step>\n", replaced atomically, last
//   <save_dir>/iter_0000010/manifest.json            mt.v1.CheckpointManifest as JSON
//   <save_dir>/iter_0000010/mp_rank_TT_PPP.safetensors   one shard per (tp, pp) rank, or
//   <save_dir>/iter_0000010/mp_rank_TT_PPP-0000i-of-0000N.safetensors   split in N files (v2)
//   <save_dir>/.partial-iter_0000010-a<attempt>/     a save in progress (never loaded)
//
// Thread-compatible free functions.
#ifndef MT_COMMON_CHECKPOINT_CHECKPOINT_DIR_H_
#define MT_COMMON_CHECKPOINT_CHECKPOINT_DIR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint/file_writer.h"
#include "mt/v1/checkpoint.pb.h"

namespace mt::checkpoint {

inline constexpr char kFormatName[] = "mt-checkpoint";
// 2: a rank's shard may be split into several files (FORMAT.md). Readers take 1 and 2.
inline constexpr int kFormatVersion = 2;
inline constexpr char kShardFormatName[] = "mt-shard";
inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kLatestFile[] = "latest_checkpointed_iteration.txt";

// "iter_0000010" (Megatron's naming, at least 7 digits).
std::string IterationDirName(int64_t step);
// The step of an "iter_NNNNNNN" name, or -1.
int64_t ParseIterationDirName(const std::string& name);
// "mp_rank_01_002.safetensors" for tp 1, pp 2.
std::string ShardFileName(int tp_rank, int pp_rank);
// File `index` (0-based) of `count`: ShardFileName when count is 1, else
// "mp_rank_01_002-00001-of-00004.safetensors" (1-based in the name, like Hugging Face's).
std::string ShardFileName(int tp_rank, int pp_rank, int index, int count);
// How a rank's shard is split into files: consecutive runs of tensors (by their byte sizes, in
// order), each of at most `max_file_bytes` unless one tensor alone is larger, balanced so that
// the files are of similar size (they are written and read in parallel). One group when
// max_file_bytes <= 0. Never empty groups; no group at all for no tensors.
std::vector<std::vector<size_t>> SplitIntoFiles(const std::vector<uint64_t>& sizes,
                                                int64_t max_file_bytes);
// ".partial-iter_0000010-a3".
std::string PartialDirName(int64_t step, int attempt);

// manifest.json of `dir`. DATA_LOSS when it does not parse or is not an mt manifest;
// FAILED_PRECONDITION for a newer format version.
absl::StatusOr<mt::v1::CheckpointManifest> ReadManifest(const std::string& dir);
std::string ManifestToJson(const mt::v1::CheckpointManifest& manifest);
absl::Status WriteManifest(const std::string& dir, const mt::v1::CheckpointManifest& manifest);

// The step in <save_dir>/latest_checkpointed_iteration.txt; NOT_FOUND when there is none.
absl::StatusOr<int64_t> ReadLatest(const std::string& save_dir);
absl::Status WriteLatest(const std::string& save_dir, int64_t step);
// Steps of the iter_* directories of `save_dir` that hold a manifest, ascending.
std::vector<int64_t> ListCheckpointSteps(const std::string& save_dir);

// Re-reads every file the manifest lists and checks its size and SHA-256 (the files in
// parallel on `threads` threads; 0 = DefaultIoThreads()). One line per problem
// ("mp_rank_01_000.safetensors: sha256 mismatch"); empty when all is well.
std::vector<std::string> VerifyCheckpointFiles(const std::string& dir,
                                               const mt::v1::CheckpointManifest& manifest,
                                               int threads = 0);

// The verification pass of a load: every listed file read once and checked; the files `keep`
// selects stay in memory (while their total stays within `max_keep_bytes`), so that the
// restore reads no file twice and restores exactly the bytes that were checked.
struct VerifyOptions {
  int threads = 0;  // 0 = DefaultIoThreads()
  // nullptr = keep none.
  std::function<bool(const mt::v1::CheckpointFile&)> keep;
  int64_t max_keep_bytes = int64_t{32} << 30;
  // Sees every block of each kept file as it is read (file_writer.h ReadObserver: before the
  // file is verified), on the reading threads (one thread per file at a time). nullptr = none.
  std::function<void(const mt::v1::CheckpointFile&, uint64_t offset, absl::string_view bytes)>
      observe;
};
struct VerifiedFiles {
  std::vector<std::string> problems;    // as VerifyCheckpointFiles
  std::shared_ptr<InMemoryFiles> kept;  // null when none was kept
  int64_t bytes_read = 0;
};
VerifiedFiles ReadAndVerifyCheckpointFiles(const std::string& dir,
                                           const mt::v1::CheckpointManifest& manifest,
                                           const VerifyOptions& options);

// What one rank wrote for a save (passed between ranks as a short string).
struct ShardFile {
  std::string file;  // relative to the checkpoint directory
  int64_t size = 0;
  std::string sha256;
};
struct ShardResult {
  int rank = 0;
  bool ok = false;
  // The rank's files; empty when it wrote none.
  std::vector<ShardFile> files;
  std::string error;  // when !ok
  // A rank with one file may name it here instead (AllFiles() puts it first).
  std::string file;
  int64_t size = 0;
  std::string sha256;
  std::vector<ShardFile> AllFiles() const;
};
std::string SerializeShardResult(const ShardResult& r);
absl::StatusOr<ShardResult> ParseShardResult(const std::string& s);

// Rank 0's part of a save, once every rank has reported: builds the manifest from `base`
// (spec, layout, step, trainer state ...) and the shard headers, writes it into the partial
// directory, renames the partial directory to iter_<step>, then replaces `latest`. On any
// error (a rank failed, I/O) the partial directory is removed and `latest` is untouched.
// Returns the committed manifest.
absl::StatusOr<mt::v1::CheckpointManifest> CommitCheckpoint(
    const std::string& save_dir, const std::string& partial_dir, mt::v1::CheckpointManifest base,
    const std::vector<ShardResult>& results);

// Removes a directory tree (best effort for the contents; the error of the last step).
absl::Status RemoveTree(const std::string& path);

// What to load from `path`: a checkpoint directory (with manifest.json) is taken as it is
// (and must verify); a save directory gives its latest checkpoint, or, when that one is
// missing or damaged, the newest older one that verifies. `problems` lists every checkpoint
// skipped and why.
// What a loader keeps with a choice besides the verified files (the worker's copies of them on
// the GPU, worker/checkpoint/checkpointer.h); opaque here.
class LoadAttachment {
 public:
  virtual ~LoadAttachment() = default;
};
struct LoadChoice {
  std::string dir;
  mt::v1::CheckpointManifest manifest;
  std::vector<std::string> problems;
  // The files kept in memory by the verification (ChooseOptions::keep); null when none.
  std::shared_ptr<const InMemoryFiles> files;
  // Bytes the verification read (each file of each checkpoint tried, once).
  int64_t bytes_read = 0;
  // Set by the worker's ChooseLoad (copies of `files` on the loading device); null when none.
  std::shared_ptr<const LoadAttachment> attachment;
};
absl::StatusOr<LoadChoice> ChooseCheckpoint(const std::string& path, bool verify = true);
struct ChooseOptions {
  bool verify = true;
  // Which files the verification keeps in memory for the restore (VerifyOptions); `keep` sees
  // the candidate's manifest, since the choice may fall back to an older checkpoint.
  std::function<bool(const mt::v1::CheckpointManifest&, const mt::v1::CheckpointFile&)> keep;
  int64_t max_keep_bytes = int64_t{32} << 30;
  int threads = 0;  // 0 = DefaultIoThreads()
  // VerifyOptions::observe for each candidate tried (`dir` names it: a candidate that fails
  // verification is followed by an older one, whose blocks arrive under another `dir`).
  std::function<void(const std::string& dir, const mt::v1::CheckpointFile&, uint64_t offset,
                     absl::string_view bytes)>
      observe;
};
absl::StatusOr<LoadChoice> ChooseCheckpoint(const std::string& path, const ChooseOptions& options);

}  // namespace mt::checkpoint

#endif  // MT_COMMON_CHECKPOINT_CHECKPOINT_DIR_H_
