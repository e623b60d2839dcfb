#include "common/base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/errors.h"

namespace mt {
namespace {

constexpr size_t kMaxPathBytes = 4096;

}  // namespace

namespace {

// Files that report a size of 0 (/proc, /sys, pipes): read until EOF, at most max_bytes. Takes
// the descriptor. A process gone while its /proc file is read is an error (ESRCH), not a throw.
absl::StatusOr<std::string> ReadToEnd(int fd, const std::string& path, uint64_t max_bytes) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus("reading", path, err);
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is over the limit of ", max_bytes, " bytes"));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("stat", path, err);
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", st.st_size, " bytes, over the limit of ", max_bytes));
  }
  if (st.st_size == 0) return ReadToEnd(fd, path, max_bytes);
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::close(fd);
      return ErrnoStatus("reading", path, err);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

absl::Status FsyncDirectory(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening directory", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus("fsync", dir, err);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 unsigned mode) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) return ErrnoStatus("creating", tmp, errno);
  if (absl::Status s = WriteAll(fd, contents, tmp); !s.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoStatus("fsync", tmp, err);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("renaming to", path, err);
  }
  const size_t slash = path.rfind('/');
  return FsyncDirectory(slash == std::string::npos ? "." : path.substr(0, slash + 1));
}

absl::Status WriteAll(int fd, absl::string_view data, absl::string_view path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("writing", path, n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("MakeDirectories: the path is empty");
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i != dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    if (::mkdir(prefix.c_str(), 0755) == 0) continue;
    const int err = errno;
    struct stat st;
    if (err == EEXIST && ::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    return ErrnoStatus("creating directory", prefix, err == EEXIST ? ENOTDIR : err);
  }
  return absl::OkStatus();
}

absl::Status ValidatePath(absl::string_view path, absl::string_view field) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": path is empty"));
  if (path.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": path contains a NUL byte"));
  }
  if (path.size() > kMaxPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": path is ", path.size(),
                                                   " bytes, over the limit of ", kMaxPathBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateRelativePath(absl::string_view path, absl::string_view field) {
  if (absl::Status s = ValidatePath(path, field); !s.ok()) return s;
  if (path.front() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", path, "' is absolute; give a path relative to its root"));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": '", path, "' contains '..'; paths may not leave their root"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mt
