// The chaos soak's checkpoint disk: a size-limited tmpfs the soak mounts (needs root), that
// every job saves to, and that a fault fills (a file of all but `leave` free bytes) so that the
// next save fails with ENOSPC, then frees again. Unmounted (lazily, so that a process still
// holding a file cannot keep it) on destruction; tests/chaos/run.sh also removes the mounts of a
// run that was killed. Not thread-safe.
#ifndef MT_TESTS_CHAOS_CHECKPOINT_DISK_H_
#define MT_TESTS_CHAOS_CHECKPOINT_DISK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace mt::chaos {

class CheckpointDisk {
 public:
  // Mounts a tmpfs of `bytes` at `path` (created when missing).
  static absl::StatusOr<std::unique_ptr<CheckpointDisk>> Mount(const std::string& path,
                                                               int64_t bytes);
  ~CheckpointDisk();

  const std::string& path() const { return path_; }
  // Free bytes (statvfs).
  absl::StatusOr<int64_t> FreeBytes() const;
  // Takes all but `leave` free bytes (fallocate of a filler file); Free() gives them back.
  absl::Status Fill(int64_t leave);
  absl::Status Free();

 private:
  explicit CheckpointDisk(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace mt::chaos

#endif  // MT_TESTS_CHAOS_CHECKPOINT_DISK_H_
