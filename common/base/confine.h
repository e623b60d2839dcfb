// Confined paths: the allow-list of directory roots that every user-given path (a job's data,
// tokenizer, save, load and TensorBoard paths; an import or export directory) must lie under,
// and the resolution that makes the check mean something. A path is resolved the way the
// kernel would when it is opened or created: component by component, "." dropped, ".." taking
// the parent of what was resolved so far (after symbolic links, not lexically), every symbolic
// link followed, dangling ones too (to where a write through them would create the file), and
// the components that do not exist yet appended as they are. The resolved path must equal a
// root or lie below it ("/data2" is not under "/data").
//
// What this cannot close: a link swapped in between the check and the use (the daemons check
// again right before use; the trainer runs as the daemon's user).
//
// Thread-safe: ResolvePath and PathIsWithin are free functions; AllowedRoots is immutable after
// Create.
#ifndef MT_COMMON_BASE_CONFINE_H_
#define MT_COMMON_BASE_CONFINE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {

// `path` (absolute) resolved as described above: absolute, no "." or ".." components, no
// repeated or trailing '/', no symbolic link among its existing components. Errors:
// INVALID_ARGUMENT for a relative or empty path or one with NUL; FAILED_PRECONDITION for a
// component that cannot be examined (EACCES, ELOOP after 40 links, a path over 4096 bytes).
absl::StatusOr<std::string> ResolvePath(absl::string_view path);

// Whether the resolved path `path` is `root` or lies below it (both as ResolvePath returns
// them). Pure.
bool PathIsWithin(absl::string_view path, absl::string_view root);

// Checks that `name` (relative) inside directory `dir` resolves to a place inside `dir`:
// FAILED_PRECONDITION "<field>: <name> leads outside <dir> (a symbolic link?)" otherwise.
absl::Status CheckStaysInside(const std::string& dir, const std::string& name,
                              absl::string_view field);

class AllowedRoots {
 public:
  // No roots: every path is allowed (a coordinator on loopback without --allowed-root).
  AllowedRoots() = default;
  // Each root must exist and be a directory; it is kept resolved. INVALID_ARGUMENT naming
  // `flag` (e.g. "--allowed-root") and the root otherwise.
  static absl::StatusOr<AllowedRoots> Create(const std::vector<std::string>& roots,
                                             absl::string_view flag = "--allowed-root");
  // Roots given by another host (the coordinator's, sent with each assignment): resolved here
  // like any path, but a root need not exist on this host (a path under a missing root is
  // still confined to it). INVALID_ARGUMENT naming `flag` for a relative or unresolvable root.
  static absl::StatusOr<AllowedRoots> FromPeer(const std::vector<std::string>& roots,
                                               absl::string_view flag);

  bool enabled() const { return !roots_.empty(); }
  const std::vector<std::string>& roots() const { return roots_; }

  // OK when confinement is off or `path` resolves inside a root. PERMISSION_DENIED naming
  // `field`, the path, where it resolves and the roots otherwise; INVALID_ARGUMENT for a
  // relative path.
  absl::Status Check(absl::string_view path, absl::string_view field) const;

 private:
  explicit AllowedRoots(std::vector<std::string> roots) : roots_(std::move(roots)) {}
  std::vector<std::string> roots_;
};

}  // namespace mt

#endif  // MT_COMMON_BASE_CONFINE_H_
