#include "coordinator/jobs/save_dir.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "coordinator/jobs/job_state.h"

namespace mt::coordinator {

std::string NormalizeDir(absl::string_view path) {
  if (path.empty()) return "";
  const bool absolute = path.front() == '/';
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == ".." && !parts.empty() && parts.back() != "..") {
      parts.pop_back();
    } else if (part != ".." || !absolute) {  // "/.." is "/"
      parts.push_back(part);
    }
  }
  const std::string joined = absl::StrJoin(parts, "/");
  if (absolute) return "/" + joined;
  return joined.empty() ? "." : joined;
}

absl::Status CheckSaveDirFree(absl::string_view save_dir, const mt::v1::Job& holder) {
  if (save_dir.empty() || IsTerminal(holder.state())) return absl::OkStatus();
  const std::string mine = NormalizeDir(save_dir);
  if (mine != NormalizeDir(holder.spec().checkpoint().save_dir())) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint.save_dir ", mine, " is in use by job ", holder.id(), " (",
      mt::v1::JobState_Name(holder.state()),
      "); two live jobs would overwrite each other's checkpoints: choose another save_dir, or "
      "wait for ",
      holder.id(), " to end (mtctl cancel ", holder.id(), " stops it)"));
}

}  // namespace mt::coordinator
