// errno → absl::Status, written once (DESIGN.md §3: common/base). Every file, socket and
// process error of the project goes through here, so that the same errno always gives the same
// canonical code and a message of the same shape: "<what> <path>: <strerror>".
// Thread-safe free functions.
#ifndef MT_COMMON_BASE_ERRORS_H_
#define MT_COMMON_BASE_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mt {

// The canonical code of an errno value:
//   ENOENT                    NOT_FOUND
//   EACCES, EPERM, EROFS      PERMISSION_DENIED
//   ENOSPC, EDQUOT, EFBIG     RESOURCE_EXHAUSTED
//   EEXIST                    ALREADY_EXISTS
//   anything else             INTERNAL
absl::StatusCode ErrnoToCode(int err);

// "<what> <path>: <strerror(err)>" with ErrnoToCode(err); a full disk (ENOSPC, EDQUOT, EFBIG)
// adds " (disk full or file too large)". An empty `path` leaves it out: "<what>: <strerror>".
//   ErrnoStatus("opening", "/data/x.bin", ENOENT)
//     → NOT_FOUND "opening /data/x.bin: No such file or directory"
absl::Status ErrnoStatus(absl::string_view what, absl::string_view path, int err);

}  // namespace mt

#endif  // MT_COMMON_BASE_ERRORS_H_
