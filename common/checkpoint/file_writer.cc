#include "common/checkpoint/file_writer.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"

namespace mt::checkpoint {
namespace {

// Distinguishes temporary names of writers in one process (async and sync saves, threads).
std::atomic<uint64_t> next_tmp_id{0};

}  // namespace

absl::Status IoError(absl::string_view what, const std::string& path, int err) {
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(absl::StrCat(msg, " (disk full or file too large)"));
    case ENOENT:
      return absl::NotFoundError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

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

absl::StatusOr<FileDigest> DigestFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("opening", path, errno);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<char> buf(8 << 20);
  Sha256 sha;
  FileDigest out;
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return IoError("reading", path, err);
    }
    if (n == 0) break;
    sha.Update(buf.data(), static_cast<size_t>(n));
    out.size += n;
  }
  ::close(fd);
  out.sha256 = sha.HexDigest();
  return out;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string JoinPath(const std::string& base, const std::string& name) {
  if (base.empty()) return name;
  if (base.back() == '/') return base + name;
  return absl::StrCat(base, "/", name);
}

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(
    const std::string& path) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", next_tmp_id.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("creating", tmp, errno);
  return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, tmp, fd));
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
  sha_.Update(data, size);
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    // At most 1 GiB per call: Linux writes at most ~2 GiB at once anyway.
    const size_t chunk = std::min<size_t>(size - done, size_t{1} << 30);
    ssize_t n = ::write(fd_, p + done, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      Abort();
      return IoError("writing", tmp_, err);
    }
    done += static_cast<size_t>(n);
  }
  written_ += static_cast<int64_t>(size);
  return absl::OkStatus();
}

absl::StatusOr<FileDigest> AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  if (::fsync(fd_) != 0) {
    const int err = errno;
    Abort();
    return IoError("fsync", tmp_, err);
  }
  if (::close(fd_) != 0) {
    const int err = errno;
    fd_ = -1;
    Abort();
    return IoError("closing", tmp_, err);
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    Abort();
    return IoError("renaming to", path_, err);
  }
  committed_ = true;
  if (absl::Status s = FsyncDirectory(DirName(path_)); !s.ok()) return s;
  FileDigest out;
  out.size = written_;
  out.sha256 = sha_.HexDigest();
  return out;
}

}  // namespace mt::checkpoint
