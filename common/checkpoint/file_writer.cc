#include "common/checkpoint/file_writer.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/errors.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"

namespace mt::checkpoint {
namespace {

// Distinguishes temporary names of writers in one process (async and sync saves, threads).
std::atomic<uint64_t> next_tmp_id{0};

// Hash and write in slices that stay in the cache between the two.
constexpr size_t kWriteSlice = size_t{4} << 20;
constexpr size_t kReadChunk = size_t{8} << 20;

// The bytes read so far by ReadAheadAndHash's reader. Thread-safe.
class ReadProgress {
 public:
  void Advance(size_t n) {
    absl::MutexLock lock(&mu_);
    read_ += n;
  }
  void Finish(int err) {
    absl::MutexLock lock(&mu_);
    finished_ = true;
    err_ = err;
  }
  // Waits until more than `have` bytes were read or the reader finished; returns the bytes
  // read, and in `err` the reader's errno (0: none) once it finished.
  size_t WaitBeyond(size_t have, bool* finished, int* err) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return read_ > have || finished_; };
    mu_.Await(absl::Condition(&ready));
    *finished = finished_;
    *err = err_;
    return read_;
  }

 private:
  absl::Mutex mu_;
  size_t read_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int err_ ABSL_GUARDED_BY(mu_) = 0;
};

// Reads [0, size) of `fd` into `dst` on a thread of its own (pread, in kReadChunk blocks) while
// the calling thread hashes each block and shows it to `observer` in order. Returns the bytes
// read and hashed: fewer than `size` when the file is shorter than its fstat said.
absl::StatusOr<size_t> ReadAheadAndHash(int fd, const std::string& path, char* dst, size_t size,
                                        Sha256& sha, const ReadObserver& observer) {
  ReadProgress progress;
  std::thread reader([&] {
    size_t off = 0;
    int err = 0;
    while (off < size) {
      const ssize_t n =
          ::pread(fd, dst + off, std::min(kReadChunk, size - off), static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        err = errno;
        break;
      }
      if (n == 0) break;  // shorter than fstat said
      off += static_cast<size_t>(n);
      progress.Advance(static_cast<size_t>(n));
    }
    progress.Finish(err);
  });
  size_t hashed = 0;
  bool finished = false;
  int err = 0;
  while (hashed < size) {
    const size_t avail = progress.WaitBeyond(hashed, &finished, &err);
    if (avail == hashed) break;  // the reader stopped short
    while (hashed < avail) {
      const size_t n = std::min(kReadChunk, avail - hashed);
      sha.Update(dst + hashed, n);
      if (observer != nullptr) observer(hashed, absl::string_view(dst + hashed, n));
      hashed += n;
    }
  }
  reader.join();
  if (err != 0) return ErrnoStatus("reading", path, err);
  return hashed;
}

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::Update(const void* data, size_t size) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, size);
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

absl::StatusOr<FileDigest> DigestFile(const std::string& path) { return DigestFile(path, nullptr); }

absl::StatusOr<FileDigest> DigestFile(const std::string& path, FileBytes* keep) {
  return DigestFile(path, keep, nullptr);
}

absl::StatusOr<FileDigest> DigestFile(const std::string& path, FileBytes* keep,
                                      const ReadObserver& observer) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening", path, errno);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat", path, errno);
  const size_t expected = static_cast<size_t>(st.st_size);
  std::unique_ptr<char[]> whole;
  std::vector<char> chunk;
  if (keep != nullptr) {
    whole.reset(new char[std::max<size_t>(expected, 1)]);
  } else {
    chunk.resize(kReadChunk);
  }
  Sha256 sha;
  FileDigest out;
  size_t done = 0;
  if (whole != nullptr && expected >= 2 * kReadChunk) {
    // The file's expected bytes: read ahead by a thread of its own while this one hashes (and
    // observes) what has arrived, so that the file goes at the speed of the slower of the two
    // rather than of their sum (what the last file of a load, read alone, waits for).
    MT_ASSIGN_OR_RETURN(done, ReadAheadAndHash(fd, path, whole.get(), expected, sha, observer));
    if (::lseek(fd, static_cast<off_t>(done), SEEK_SET) < 0) {
      return ErrnoStatus("seeking", path, errno);
    }
  }
  while (true) {
    // Into the kept buffer at its place, else into the one chunk; a file that grew since
    // fstat is read to its end through the chunk (and then not kept: the size is wrong).
    char* dst = whole != nullptr && done < expected ? whole.get() + done : nullptr;
    size_t want = dst != nullptr ? std::min(kReadChunk, expected - done) : kReadChunk;
    if (dst == nullptr) {
      if (chunk.empty()) chunk.resize(kReadChunk);
      dst = chunk.data();
    }
    ssize_t n = ::read(fd, dst, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus("reading", path, errno);
    if (n == 0) break;
    sha.Update(dst, static_cast<size_t>(n));
    if (observer != nullptr && whole != nullptr && dst != chunk.data()) {
      observer(done, absl::string_view(dst, static_cast<size_t>(n)));
    }
    done += static_cast<size_t>(n);
  }
  out.size = static_cast<int64_t>(done);
  out.sha256 = sha.HexDigest();
  if (keep != nullptr && done == expected) {
    keep->data = std::move(whole);
    keep->size = expected;
  }
  return out;
}

void InMemoryFiles::Add(const std::string& name, FileBytes bytes) {
  bytes_ += static_cast<int64_t>(bytes.size);
  auto [it, inserted] = files_.emplace(name, FileBytes{});
  if (!inserted) bytes_ -= static_cast<int64_t>(it->second.size);
  it->second = std::move(bytes);
}

const FileBytes* InMemoryFiles::Find(const std::string& name) const {
  auto it = files_.find(name);
  return it == files_.end() ? nullptr : &it->second;
}

absl::Status RunParallel(size_t n, int threads, const std::function<absl::Status(size_t)>& fn) {
  std::vector<absl::Status> status(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) status[i] = fn(i);
  };
  const size_t extra = std::min<size_t>(n, static_cast<size_t>(std::max(1, threads))) - (n > 0);
  std::vector<std::thread> pool;
  pool.reserve(extra);
  for (size_t t = 0; t < extra; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

int DefaultIoThreads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp<unsigned>(hw, 1, 8));
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(const std::string& path,
                                                                           const Options& options) {
  if (options.writeback_chunk_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AtomicFileWriter::Options.writeback_chunk_bytes is ",
                     options.writeback_chunk_bytes, " (give 0 for none, or a byte count > 0)"));
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", next_tmp_id.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("creating", tmp, errno);
  return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, tmp, fd, options));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) Abort();
}

void AtomicFileWriter::Abort() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
}

absl::Status AtomicFileWriter::Append(const void* data, size_t size) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    // Hash a slice, then write it while it is still in the cache.
    const size_t slice = std::min(size - done, kWriteSlice);
    sha_.Update(p + done, slice);
    size_t put = 0;
    while (put < slice) {
      ssize_t n = ::write(fd_, p + done + put, slice - put);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        Abort();
        return ErrnoStatus("writing", tmp_, err);
      }
      put += static_cast<size_t>(n);
    }
    done += slice;
    written_ += static_cast<int64_t>(slice);
    if (options_.writeback_chunk_bytes > 0 &&
        written_ - writeback_from_ >= options_.writeback_chunk_bytes) {
      MT_RETURN_IF_ERROR(WriteBack());
    }
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::WriteBack() {
  if (!writeback_supported_) return absl::OkStatus();
  // Start writing the newest chunk to the disk (returns once the I/O is queued).
  if (::sync_file_range(fd_, writeback_from_, written_ - writeback_from_, SYNC_FILE_RANGE_WRITE) !=
      0) {
    const int err = errno;
    if (err == EINVAL || err == ESPIPE || err == ENOSYS) {
      writeback_supported_ = false;  // a file system without it: fsync does it all at Commit
      return absl::OkStatus();
    }
    Abort();
    return ErrnoStatus("writing back", tmp_, err);
  }
  if (options_.drop_written_pages && dropped_to_ < writeback_from_) {
    // The chunk before it, handed over one chunk ago: wait until it is on the disk, then drop
    // its (now clean) pages. An error seen here is consumed (fsync would not report it again),
    // hence reported now.
    if (::sync_file_range(fd_, dropped_to_, writeback_from_ - dropped_to_,
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                              SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
      const int err = errno;
      Abort();
      return ErrnoStatus("writing back", tmp_, err);
    }
    (void)::posix_fadvise(fd_, dropped_to_, writeback_from_ - dropped_to_, POSIX_FADV_DONTNEED);
    dropped_to_ = writeback_from_;
  }
  writeback_from_ = written_;
  return absl::OkStatus();
}

absl::StatusOr<FileDigest> AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  if (::fsync(fd_) != 0) {
    const int err = errno;
    Abort();
    return ErrnoStatus("fsync", tmp_, err);
  }
  // Everything is on the disk and clean: the page cache need not keep any of it.
  if (options_.drop_written_pages) (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  if (::close(fd_) != 0) {
    const int err = errno;
    fd_ = -1;
    Abort();
    return ErrnoStatus("closing", tmp_, err);
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    Abort();
    return ErrnoStatus("renaming to", path_, err);
  }
  committed_ = true;
  if (absl::Status s = FsyncDirectory(DirName(path_)); !s.ok()) return s;
  FileDigest out;
  out.size = written_;
  out.sha256 = sha_.HexDigest();
  return out;
}

}  // namespace mt::checkpoint
