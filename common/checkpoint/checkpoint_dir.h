// The on-disk layout of mt checkpoints (worker/checkpoint/FORMAT.md) and everything about it
// that needs no LibTorch: names, the manifest, the commit of a save, the `latest` pointer,
// verification and the choice of what to load (falling back past damaged checkpoints).
//
//   <save_dir>/latest_checkpointed_iteration.txt    "<step>\n", replaced atomically, last
//   <save_dir>/iter_0000010/manifest.json            mt.v1.CheckpointManifest as JSON
//   <save_dir>/iter_0000010/mp_rank_TT_PPP.safetensors   one shard per (tp, pp) rank
//   <save_dir>/.partial-iter_0000010-a<attempt>/     a save in progress (never loaded)
//
// Thread-compatible free functions.
#ifndef MT_COMMON_CHECKPOINT_CHECKPOINT_DIR_H_
#define MT_COMMON_CHECKPOINT_CHECKPOINT_DIR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mt/v1/checkpoint.pb.h"

namespace mt::checkpoint {

inline constexpr char kFormatName[] = "mt-checkpoint";
inline constexpr int kFormatVersion = 1;
inline constexpr char kShardFormatName[] = "mt-shard";
inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kLatestFile[] = "latest_checkpointed_iteration.txt";

// "iter_0000010" (Megatron's naming, at least 7 digits).
std::string IterationDirName(int64_t step);
// The step of an "iter_NNNNNNN" name, or -1.
int64_t ParseIterationDirName(const std::string& name);
// "mp_rank_01_002.safetensors" for tp 1, pp 2.
std::string ShardFileName(int tp_rank, int pp_rank);
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

// Re-reads every file the manifest lists and checks its size and SHA-256. One line per
// problem ("mp_rank_01_000.safetensors: sha256 mismatch"); empty when all is well.
std::vector<std::string> VerifyCheckpointFiles(const std::string& dir,
                                               const mt::v1::CheckpointManifest& manifest);

// What one rank wrote for a save (passed between ranks as a short string).
struct ShardResult {
  int rank = 0;
  bool ok = false;
  std::string file;  // relative to the checkpoint directory; empty when the rank wrote none
  int64_t size = 0;
  std::string sha256;
  std::string error;  // when !ok
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
struct LoadChoice {
  std::string dir;
  mt::v1::CheckpointManifest manifest;
  std::vector<std::string> problems;
};
absl::StatusOr<LoadChoice> ChooseCheckpoint(const std::string& path, bool verify = true);

}  // namespace mt::checkpoint

#endif  // MT_COMMON_CHECKPOINT_CHECKPOINT_DIR_H_
