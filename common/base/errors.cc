#include "common/base/errors.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace mt {

absl::StatusCode ErrnoToCode(int err) {
  switch (err) {
    case ENOENT:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::StatusCode::kResourceExhausted;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status ErrnoStatus(absl::string_view what, absl::string_view path, int err) {
  std::string msg(what);
  if (!path.empty()) absl::StrAppend(&msg, " ", path);
  absl::StrAppend(&msg, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
    absl::StrAppend(&msg, " (disk full or file too large)");
  }
  return absl::Status(ErrnoToCode(err), msg);
}

}  // namespace mt
