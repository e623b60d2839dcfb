#include "worker/daemon/assignment_paths.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/spec/validate.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::worker {

absl::Status CheckAssignmentPaths(const mt::v1::Assignment& assignment, const AllowedRoots& roots) {
  if (!roots.enabled()) return absl::OkStatus();
  mt::v1::JobSpec spec;
  if (!spec.ParseFromString(assignment.spec())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the assignment of ", assignment.job_id(), " carries no readable spec"));
  }
  absl::Status paths = spec::CheckPathsConfined(spec, roots);
  if (!assignment.resume_from().empty()) {
    absl::Status resume = roots.Check(assignment.resume_from(), "resume_from");
    if (!resume.ok()) {
      return absl::Status(
          resume.code(),
          paths.ok() ? resume.message() : absl::StrCat(paths.message(), "\n", resume.message()));
    }
  }
  return paths;
}

}  // namespace mt::worker
