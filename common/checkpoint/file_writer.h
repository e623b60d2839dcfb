// Durable file writing for checkpoints: a file is written under a temporary name in its final
// directory, hashed (SHA-256) as it goes, fsynced, and only then renamed to its name, so a
// reader sees the whole file or none of it. Any error (a full disk: ENOSPC, EDQUOT, EFBIG)
// removes the temporary file and leaves whatever had that name before untouched.
//
// Thread-compatible: one thread writes one file.
#ifndef MT_COMMON_CHECKPOINT_FILE_WRITER_H_
#define MT_COMMON_CHECKPOINT_FILE_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt::checkpoint {

// Incremental SHA-256 (OpenSSL). Thread-compatible.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t size);
  // Lower-case hex; the object is finished afterwards.
  std::string HexDigest();

 private:
  void* ctx_;  // EVP_MD_CTX
};

// Size and SHA-256 of a file, read in large blocks.
struct FileDigest {
  int64_t size = 0;
  std::string sha256;
};
absl::StatusOr<FileDigest> DigestFile(const std::string& path);

// An error status for a failed system call on `path`: RESOURCE_EXHAUSTED for a full disk
// (ENOSPC, EDQUOT, EFBIG), NOT_FOUND, PERMISSION_DENIED, else INTERNAL.
absl::Status IoError(absl::string_view what, const std::string& path, int err);

class AtomicFileWriter {
 public:
  // Opens "<path>.tmp.<pid>.<n>" for writing (the directory must exist).
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(const std::string& path);
  // Removes the temporary file unless Commit succeeded.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  absl::Status Append(const void* data, size_t size);
  absl::Status Append(absl::string_view data) { return Append(data.data(), data.size()); }
  // fsync, rename to the final name, fsync the directory. Returns the size and SHA-256 of
  // what was written.
  absl::StatusOr<FileDigest> Commit();
  int64_t bytes_written() const { return written_; }
  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(std::string path, std::string tmp, int fd)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  void Abort();

  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  int64_t written_ = 0;
  bool committed_ = false;
  Sha256 sha_;
};

// The directory part of a path ("." when it has none).
std::string DirName(const std::string& path);
// `base` + "/" + `name`, without doubling slashes.
std::string JoinPath(const std::string& base, const std::string& name);

}  // namespace mt::checkpoint

#endif  // MT_COMMON_CHECKPOINT_FILE_WRITER_H_
