// Path helpers, written once (DESIGN.md §3: common/base). Thread-safe free functions; they
// touch the file system only where the name says so (PathExists, IsDirectory).
#ifndef MT_COMMON_BASE_PATHS_H_
#define MT_COMMON_BASE_PATHS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace mt {

// "dir/name" with exactly one '/' between them: JoinPath("a/", "b") == JoinPath("a", "b") ==
// "a/b"; an empty `dir` gives `name`, an empty `name` gives `dir`. An absolute `name` is still
// appended (JoinPath("a", "/b") == "a/b"): callers that take user paths validate them first.
std::string JoinPath(absl::string_view dir, absl::string_view name);

// Whether `path` names anything (following symbolic links): stat(2) succeeds.
bool PathExists(const std::string& path);

// Whether `path` is a directory (following symbolic links).
bool IsDirectory(const std::string& path);

}  // namespace mt

#endif  // MT_COMMON_BASE_PATHS_H_
