#include "coordinator/job_access.h"

#include "absl/strings/str_cat.h"

namespace mt::coordinator {

absl::Status CheckJobAccess(const rpc::Principal& caller, const mt::v1::Job& job,
                            absl::string_view method) {
  if (caller.role == rpc::Role::kAdmin) return absl::OkStatus();
  if (caller.role == rpc::Role::kSubmit && !job.owner().empty() && job.owner() == caller.name) {
    return absl::OkStatus();
  }
  const std::string token =
      absl::StrCat("token '", caller.name, "' has role ", rpc::RoleName(caller.role));
  if (job.owner().empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        method, " of job ", job.id(),
        ": the job has no recorded owner (submitted without tokens, or before owners were "
        "recorded), so it needs the admin role; ",
        token));
  }
  return absl::PermissionDeniedError(
      absl::StrCat(method, " of job ", job.id(), ": the job belongs to '", job.owner(),
                   "'; acting on another's job needs the admin role (or a submit token named '",
                   job.owner(), "'); ", token));
}

}  // namespace mt::coordinator
