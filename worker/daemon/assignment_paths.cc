#include "worker/daemon/assignment_paths.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"
#include "common/spec/validate.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::worker {
namespace {

// Every path of `spec` and `resume_from` against one set of roots; `whose` prefixes the error.
absl::Status CheckAgainst(const mt::v1::JobSpec& spec, const std::string& resume_from,
                          const AllowedRoots& roots, absl::string_view whose) {
  if (!roots.enabled()) return absl::OkStatus();
  absl::Status paths = spec::CheckPathsConfined(spec, roots);
  absl::Status resume =
      resume_from.empty() ? absl::OkStatus() : roots.Check(resume_from, "resume_from");
  if (paths.ok() && resume.ok()) return absl::OkStatus();
  const absl::Status& first = paths.ok() ? resume : paths;
  std::string message = absl::StrCat(whose, ": ", first.message());
  if (!paths.ok() && !resume.ok()) absl::StrAppend(&message, "\n", resume.message());
  return absl::Status(first.code(), message);
}

}  // namespace

absl::Status CheckAssignmentPaths(const mt::v1::Assignment& assignment, const AllowedRoots& roots) {
  const bool from_coordinator = assignment.allowed_roots_size() > 0;
  if (!roots.enabled() && !from_coordinator) return absl::OkStatus();
  mt::v1::JobSpec spec;
  if (!spec.ParseFromString(assignment.spec())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the assignment of ", assignment.job_id(), " carries no readable spec"));
  }
  MT_RETURN_IF_ERROR(
      CheckAgainst(spec, assignment.resume_from(), roots, "this worker's --allowed-root"));
  if (!from_coordinator) return absl::OkStatus();
  const std::vector<std::string> peer(assignment.allowed_roots().begin(),
                                      assignment.allowed_roots().end());
  MT_ASSIGN_OR_RETURN(AllowedRoots coordinator_roots,
                      AllowedRoots::FromPeer(peer, "the coordinator's --allowed-root"));
  return CheckAgainst(spec, assignment.resume_from(), coordinator_roots,
                      "the coordinator's --allowed-root");
}

}  // namespace mt::worker
