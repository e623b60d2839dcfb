// File helpers shared by every persistent format: atomic replace, bounded reads, path checks.
// Thread-compatible free functions; no state.
#ifndef MT_COMMON_BASE_FILES_H_
#define MT_COMMON_BASE_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {

// Reads a whole file, refusing files larger than max_bytes (the limit is named in the error).
// Files that report a size of 0 (/proc, /sys) are read to their end; a process that exits while
// its /proc file is read gives an error (ESRCH), never an exception.
absl::StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes = 256ull << 20);

// Writes `contents` to `path` so that a reader sees either the old file or the new one, never a
// mix: write to "<path>.tmp.<pid>", fsync, rename over `path`, fsync the directory. A new file
// gets `mode` (less the umask): 0600 for one that holds a secret.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 unsigned mode = 0644);

// fsyncs a directory so that a rename inside it is durable.
absl::Status FsyncDirectory(const std::string& dir);

// Writes all of `data` to `fd`, through short writes and EINTR. `path` names the file in the
// error; on error some prefix of `data` may have been written.
absl::Status WriteAll(int fd, absl::string_view data, absl::string_view path);

// Creates `dir` and every missing parent (mode 0755, less the umask), like `mkdir -p`. A part
// that exists as a directory is kept; one that exists as anything else is an error.
absl::Status MakeDirectories(const std::string& dir);

// Checks a user-supplied relative path component list: non-empty, no NUL, not absolute, no
// ".." component, at most 4096 bytes. `field` names the field in the error.
absl::Status ValidateRelativePath(absl::string_view path, absl::string_view field);

// Checks a user-supplied path (absolute or relative): non-empty, no NUL, at most 4096 bytes.
absl::Status ValidatePath(absl::string_view path, absl::string_view field);

}  // namespace mt

#endif  // MT_COMMON_BASE_FILES_H_
