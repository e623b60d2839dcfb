// Durable file writing for checkpoints: a file is written under a temporary name in its final
// directory, hashed (SHA-256) as it goes, fsynced, and only then renamed to its name, so a
// reader sees the whole file or none of it. Any error (a full disk: ENOSPC, EDQUOT, EFBIG)
// removes the temporary file and leaves whatever had that name before untouched.
//
// Also the rest of checkpoint I/O: whole files read into memory while hashed (a load reads
// each file once: the bytes it verified are the bytes it restores), and RunParallel, which
// spreads the files of a save or a load over a few threads (SHA-256 runs at ~0.5-2 GB/s on
// one core, slower than a fast disk: one file per thread keeps hashing off the critical path).
//
// Thread-compatible: one thread writes one file.
#ifndef MT_COMMON_CHECKPOINT_FILE_WRITER_H_
#define MT_COMMON_CHECKPOINT_FILE_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
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

// A whole file in memory (uninitialised allocation: no zero-fill before the read).
struct FileBytes {
  std::unique_ptr<char[]> data;
  size_t size = 0;
  absl::string_view view() const { return absl::string_view(data.get(), size); }
};

// Size and SHA-256 of a file in one sequential pass; with `keep`, the bytes read stay there
// (one read serves both the verification and the restore), read ahead by a thread of its own
// while the calling thread hashes them (a kept file of 16 MiB or more).
absl::StatusOr<FileDigest> DigestFile(const std::string& path, FileBytes* keep);
// Sees each block of a kept file as it is read, in order (`offset` into the file), on the
// thread that called DigestFile (not its read-ahead thread), BEFORE the file's hash is known:
// whatever it does with the bytes must not be used until the file has been verified. A load uses it
// to copy the bytes to the GPU while the rest is still being read.
using ReadObserver = std::function<void(uint64_t offset, absl::string_view bytes)>;
absl::StatusOr<FileDigest> DigestFile(const std::string& path, FileBytes* keep,
                                      const ReadObserver& observer);

// Files of one directory held in memory, by relative path. Thread-compatible; immutable once
// shared.
class InMemoryFiles {
 public:
  void Add(const std::string& name, FileBytes bytes);
  // nullptr when `name` is not held.
  const FileBytes* Find(const std::string& name) const;
  int64_t bytes() const { return bytes_; }
  size_t size() const { return files_.size(); }

 private:
  std::map<std::string, FileBytes> files_;
  int64_t bytes_ = 0;
};

// Runs fn(0) .. fn(n - 1) on up to `threads` threads (the calling thread is one of them);
// every index runs; returns the error of the lowest index that failed.
absl::Status RunParallel(size_t n, int threads, const std::function<absl::Status(size_t)>& fn);

// Threads for the files of one checkpoint save or load: min(8, hardware threads), >= 1.
int DefaultIoThreads();

class AtomicFileWriter {
 public:
  struct Options {
    // Written data is handed to the disk every this many bytes (sync_file_range), so that the
    // final fsync waits for the tail only; 0 = none (fsync writes everything).
    int64_t writeback_chunk_bytes = int64_t{32} << 20;
    // With writeback chunks: each chunk, once the next one is handed over, is waited for and
    // dropped from the page cache (POSIX_FADV_DONTNEED), and the whole file after the fsync. A
    // save then holds at most two chunks per file in memory instead of leaving every byte it
    // wrote cached: checkpoints are written to be read after a restart, and cached copies of
    // them would push the training data out of the cache and grow the machine's memory use by
    // a checkpoint per save (in a VM whose memory grows on demand, that growth stalls it).
    bool drop_written_pages = true;
  };

  // Opens "<path>.tmp.<pid>.<n>" for writing (the directory must exist).
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(const std::string& path) {
    return Create(path, Options());
  }
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(const std::string& path,
                                                                  const Options& options);
  // Removes the temporary file unless Commit succeeded.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Errors (the temporary file is then removed and the writer closed): a failed write, or a
  // failed writeback of an earlier chunk (an I/O error the final fsync would not see again).
  absl::Status Append(const void* data, size_t size);
  absl::Status Append(absl::string_view data) { return Append(data.data(), data.size()); }
  // fsync, rename to the final name, fsync the directory. Returns the size and SHA-256 of
  // what was written.
  absl::StatusOr<FileDigest> Commit();
  int64_t bytes_written() const { return written_; }
  const std::string& path() const { return path_; }
  // The temporary name written until Commit.
  const std::string& temp_path() const { return tmp_; }

 private:
  AtomicFileWriter(std::string path, std::string tmp, int fd, const Options& options)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd), options_(options) {}
  void Abort();
  // Hands [writeback_from_, written_) to the disk and drops the chunk before it.
  absl::Status WriteBack();

  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  Options options_;
  int64_t written_ = 0;
  int64_t writeback_from_ = 0;  // bytes before this offset were handed to writeback
  int64_t dropped_to_ = 0;      // bytes before this offset are on the disk, out of the cache
  bool writeback_supported_ = true;
  bool committed_ = false;
  Sha256 sha_;
};

// The directory part of a path ("." when it has none).
std::string DirName(const std::string& path);

}  // namespace mt::checkpoint

#endif  // MT_COMMON_CHECKPOINT_FILE_WRITER_H_
