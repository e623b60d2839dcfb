// The worker's own check of an assignment's paths against its --allowed-root list, made right
// before a rank starts (the coordinator checked at submit; this daemon trusts no path it did
// not check itself, and its roots may be narrower than the coordinator's). Pure but for the
// file system lookups of common/base/confine.h; thread-safe.
#ifndef MT_WORKER_DAEMON_ASSIGNMENT_PATHS_H_
#define MT_WORKER_DAEMON_ASSIGNMENT_PATHS_H_

#include "absl/status/status.h"
#include "common/base/confine.h"
#include "mt/v1/worker_service.pb.h"

namespace mt::worker {

// OK when every path of the assignment's spec (common/spec CheckPathsConfined) and its
// resume_from directory resolve into `roots` (this worker's --allowed-root; empty = no
// limit) and into the coordinator's roots the assignment carries (Assignment.allowed_roots;
// empty = no limit): a confined coordinator's jobs stay confined on a worker started without
// the flag. PERMISSION_DENIED listing the paths outside and whose roots they miss;
// INVALID_ARGUMENT for a spec that does not parse or a coordinator root that is not absolute.
absl::Status CheckAssignmentPaths(const mt::v1::Assignment& assignment, const AllowedRoots& roots);

}  // namespace mt::worker

#endif  // MT_WORKER_DAEMON_ASSIGNMENT_PATHS_H_
