// Job ownership: a job records the name of the token that submitted it (mt.v1.Job.owner), and
// only that name, or an admin, may act on it (cancel, delete). Reading is open to every role
// that may read (docs/security.md says why). Pure; thread-safe.
#ifndef MT_COORDINATOR_JOB_ACCESS_H_
#define MT_COORDINATOR_JOB_ACCESS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/rpc/auth.h"
#include "mt/v1/job.pb.h"

namespace mt::coordinator {

// OK when `caller` may `method` (an RPC name, for the message) the job: an admin always; a
// submit token when its name is the job's owner. PERMISSION_DENIED otherwise, naming the job,
// its owner, the caller and the role needed. A job without an owner (submitted before
// ownership was recorded, or to a coordinator without tokens) is the admins' alone.
absl::Status CheckJobAccess(const rpc::Principal& caller, const mt::v1::Job& job,
                            absl::string_view method);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOB_ACCESS_H_
