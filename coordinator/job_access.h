// Job ownership: a job records the name of the token that submitted it (mt.v1.Job.owner), and
// only that name, or an admin, may act on it (cancel, delete) and on its checkpoints (delete,
// export). Reading is open to every role that may read (docs/security.md says why). Pure;
// thread-safe.
#ifndef MT_COORDINATOR_JOB_ACCESS_H_
#define MT_COORDINATOR_JOB_ACCESS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/rpc/auth.h"
#include "mt/v1/checkpoint.pb.h"
#include "mt/v1/job.pb.h"

namespace mt::coordinator {

// OK when `caller` may `method` (an RPC name, for the message) the job: an admin always; a
// submit token when its name is the job's owner. PERMISSION_DENIED otherwise, naming the job,
// its owner, the caller and the role needed. A job without an owner (submitted before
// ownership was recorded, or to a coordinator without tokens) is the admins' alone.
absl::Status CheckJobAccess(const rpc::Principal& caller, const mt::v1::Job& job,
                            absl::string_view method);

// OK when `caller` may `method` (DeleteCheckpoint, ExportCheckpoint) the checkpoint: an admin
// always; a submit token when the checkpoint's job is its own (CheckJobAccess). `job` is that
// job, or nullptr when the checkpoint has none (imported without a job) or its job was
// deleted: such a checkpoint is the admins' alone. PERMISSION_DENIED names the checkpoint.
absl::Status CheckCheckpointAccess(const rpc::Principal& caller,
                                   const mt::v1::Checkpoint& checkpoint, const mt::v1::Job* job,
                                   absl::string_view method);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOB_ACCESS_H_
