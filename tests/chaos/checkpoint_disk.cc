#include "tests/chaos/checkpoint_disk.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/base/errors.h"

namespace mt::chaos {
namespace {

std::string FillerPath(const std::string& disk) { return disk + "/.chaos-filler"; }

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointDisk>> CheckpointDisk::Mount(const std::string& path,
                                                                      int64_t bytes) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus("creating", path, errno);
  }
  const std::string options = absl::StrCat("size=", bytes, ",mode=0755");
  if (::mount(absl::StrCat("mt-chaos-", ::getpid()).c_str(), path.c_str(), "tmpfs",
              MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    const int err = errno;
    return absl::FailedPreconditionError(
        absl::StrCat("cannot mount the checkpoint tmpfs at ", path,
                     " (needs root): ", ErrnoStatus("mount", path, err).message()));
  }
  return std::unique_ptr<CheckpointDisk>(new CheckpointDisk(path));
}

CheckpointDisk::~CheckpointDisk() { ::umount2(path_.c_str(), MNT_DETACH); }

absl::StatusOr<int64_t> CheckpointDisk::FreeBytes() const {
  struct statvfs st;
  if (::statvfs(path_.c_str(), &st) != 0) return ErrnoStatus("statvfs", path_, errno);
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

absl::Status CheckpointDisk::Fill(int64_t leave) {
  const std::string filler = FillerPath(path_);
  const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("creating", filler, errno);
  // A save racing the fill takes space between statvfs and fallocate (ENOSPC, nothing
  // allocated): measure again, a bounded number of times.
  absl::Status status = absl::OkStatus();
  for (int attempt = 0; attempt < 8; ++attempt) {
    absl::StatusOr<int64_t> free = FreeBytes();
    if (!free.ok() || *free <= leave) {
      status = free.status();
      break;
    }
    struct stat st;
    const off_t have = ::fstat(fd, &st) == 0 ? st.st_size : 0;
    const int rc = ::posix_fallocate(fd, have, *free - leave);
    if (rc == 0) break;
    if (rc != ENOSPC) {
      status = ErrnoStatus("fallocate", filler, rc);
      break;
    }
  }
  ::close(fd);
  return status;
}

absl::Status CheckpointDisk::Free() {
  const std::string filler = FillerPath(path_);
  if (::unlink(filler.c_str()) != 0 && errno != ENOENT)
    return ErrnoStatus("removing", filler, errno);
  return absl::OkStatus();
}

}  // namespace mt::chaos
