#include "common/base/confine.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/paths.h"

namespace mt {
namespace {

constexpr size_t kMaxPathBytes = 4096;
constexpr int kMaxLinks = 40;  // the kernel's MAXSYMLINKS

std::string Quoted(absl::string_view s) { return absl::StrCat("'", absl::CHexEscape(s), "'"); }

std::string Joined(const std::vector<std::string>& parts) {
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

// Pushes the components of `path` in front of `todo`, in order.
void PushFront(absl::string_view path, std::deque<std::string>* todo) {
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) todo->push_front(*it);
}

}  // namespace

absl::StatusOr<std::string> ResolvePath(absl::string_view path) {
  if (path.empty() || path.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("path ", Quoted(path), " is not absolute; give an absolute path"));
  }
  if (path.size() > kMaxPathBytes || absl::StrContains(path, absl::string_view("\0", 1))) {
    return absl::InvalidArgumentError(absl::StrCat("path ", Quoted(path.substr(0, 64)),
                                                   " is over 4096 bytes or contains a NUL byte"));
  }
  std::deque<std::string> todo;
  PushFront(path, &todo);
  std::vector<std::string> done;  // resolved components, no links among the existing ones
  int links = 0;
  while (!todo.empty()) {
    std::string c = std::move(todo.front());
    todo.pop_front();
    if (c == ".") continue;
    if (c == "..") {
      if (!done.empty()) done.pop_back();
      continue;
    }
    done.push_back(std::move(c));
    const std::string at = Joined(done);
    if (at.size() > kMaxPathBytes) {
      return absl::FailedPreconditionError(
          absl::StrCat("path ", Quoted(path), " resolves to more than 4096 bytes"));
    }
    struct stat st;
    if (::lstat(at.c_str(), &st) != 0) {
      // Missing (or below a file): created as named, or not at all.
      if (errno == ENOENT || errno == ENOTDIR) continue;
      return absl::FailedPreconditionError(absl::StrCat("cannot examine ", Quoted(at), " of ",
                                                        Quoted(path), ": ", std::strerror(errno)));
    }
    if (!S_ISLNK(st.st_mode)) continue;
    if (++links > kMaxLinks) {
      return absl::FailedPreconditionError(
          absl::StrCat("path ", Quoted(path), " goes through more than 40 symbolic links"));
    }
    char target[PATH_MAX];
    const ssize_t n = ::readlink(at.c_str(), target, sizeof(target) - 1);
    if (n < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read the link ", Quoted(at), ": ", std::strerror(errno)));
    }
    const absl::string_view t(target, static_cast<size_t>(n));
    done.pop_back();
    if (!t.empty() && t.front() == '/') done.clear();
    PushFront(t, &todo);
  }
  return Joined(done);
}

bool PathIsWithin(absl::string_view path, absl::string_view root) {
  if (root == "/") return absl::StartsWith(path, "/");
  return absl::StartsWith(path, root) && (path.size() == root.size() || path[root.size()] == '/');
}

absl::Status CheckStaysInside(const std::string& dir, const std::string& name,
                              absl::string_view field) {
  std::string absolute = dir;
  if (absolute.empty() || absolute.front() != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("getcwd: ", std::strerror(errno)));
    }
    absolute = JoinPath(cwd, dir);
  }
  absl::StatusOr<std::string> root = ResolvePath(absolute);
  if (!root.ok()) return root.status();
  absl::StatusOr<std::string> resolved = ResolvePath(JoinPath(absolute, name));
  if (!resolved.ok()) return resolved.status();
  if (!PathIsWithin(*resolved, *root)) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": ", Quoted(name), " in ", Quoted(dir),
                     " leads outside that directory (a symbolic link?); refused"));
  }
  return absl::OkStatus();
}

absl::StatusOr<AllowedRoots> AllowedRoots::Create(const std::vector<std::string>& roots,
                                                  absl::string_view flag) {
  absl::StatusOr<AllowedRoots> resolved = FromPeer(roots, flag);
  if (!resolved.ok()) return resolved.status();
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!IsDirectory(resolved->roots_[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", Quoted(roots[i]),
                       " is not an existing directory; create it or drop the flag"));
    }
  }
  return resolved;
}

absl::StatusOr<AllowedRoots> AllowedRoots::FromPeer(const std::vector<std::string>& roots,
                                                    absl::string_view flag) {
  std::vector<std::string> resolved;
  for (const std::string& root : roots) {
    absl::StatusOr<std::string> r = ResolvePath(root);
    if (!r.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", Quoted(root), ": ", r.status().message()));
    }
    resolved.push_back(*std::move(r));
  }
  return AllowedRoots(std::move(resolved));
}

absl::Status AllowedRoots::Check(absl::string_view path, absl::string_view field) const {
  if (roots_.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> resolved = ResolvePath(path);
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(),
                        absl::StrCat(field, ": ", resolved.status().message()));
  }
  for (const std::string& root : roots_) {
    if (PathIsWithin(*resolved, root)) return absl::OkStatus();
  }
  const std::string where =
      *resolved == path ? "" : absl::StrCat(" (it resolves to ", Quoted(*resolved), ")");
  return absl::PermissionDeniedError(absl::StrCat(
      field, ": ", Quoted(path), where, " is outside the allowed roots (",
      absl::StrJoin(roots_, ", "),
      "); give a path under one of them, or have the operator add a root with --allowed-root"));
}

}  // namespace mt
