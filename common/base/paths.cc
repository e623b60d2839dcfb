#include "common/base/paths.h"

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace mt {

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (name.empty()) return std::string(dir);
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  while (!name.empty() && name.front() == '/') name.remove_prefix(1);
  if (dir == "/") return absl::StrCat("/", name);
  return absl::StrCat(dir, "/", name);
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace mt
