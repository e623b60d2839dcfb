#include "coordinator/job_access.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace mt::coordinator {
namespace {

std::string TokenText(const rpc::Principal& caller) {
  return absl::StrCat("token '", caller.name, "' has role ", rpc::RoleName(caller.role));
}

// The rule of CheckJobAccess; `subject` opens the refusal ("CancelJob of job j-4").
absl::Status CheckOwner(const rpc::Principal& caller, const mt::v1::Job& job,
                        const std::string& subject) {
  if (caller.role == rpc::Role::kAdmin) return absl::OkStatus();
  if (caller.role == rpc::Role::kSubmit && !job.owner().empty() && job.owner() == caller.name) {
    return absl::OkStatus();
  }
  if (job.owner().empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        subject,
        ": the job has no recorded owner (submitted without tokens, or before owners were "
        "recorded), so it needs the admin role; ",
        TokenText(caller)));
  }
  return absl::PermissionDeniedError(
      absl::StrCat(subject, ": the job belongs to '", job.owner(),
                   "'; acting on another's job needs the admin role (or a submit token named '",
                   job.owner(), "'); ", TokenText(caller)));
}

}  // namespace

absl::Status CheckJobAccess(const rpc::Principal& caller, const mt::v1::Job& job,
                            absl::string_view method) {
  return CheckOwner(caller, job, absl::StrCat(method, " of job ", job.id()));
}

absl::Status CheckCheckpointAccess(const rpc::Principal& caller,
                                   const mt::v1::Checkpoint& checkpoint, const mt::v1::Job* job,
                                   absl::string_view method) {
  if (caller.role == rpc::Role::kAdmin) return absl::OkStatus();
  const std::string subject = absl::StrCat(method, " of checkpoint ", checkpoint.id());
  if (job == nullptr) {
    const std::string why =
        checkpoint.job_id().empty()
            ? std::string("it was imported without a job")
            : absl::StrCat("its job ", checkpoint.job_id(), " no longer exists");
    return absl::PermissionDeniedError(
        absl::StrCat(subject, ": ", why, ", so it belongs to no one and needs the admin role; ",
                     TokenText(caller)));
  }
  return CheckOwner(caller, *job, absl::StrCat(subject, " of job ", job->id()));
}

}  // namespace mt::coordinator
