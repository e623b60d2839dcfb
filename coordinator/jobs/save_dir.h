// One save_dir per live job: the lexical form under which two jobs' checkpoint directories are
// compared, and the refusal naming the job that holds one. Pure functions; thread-safe.
#ifndef MT_COORDINATOR_JOBS_SAVE_DIR_H_
#define MT_COORDINATOR_JOBS_SAVE_DIR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "mt/v1/job.pb.h"

namespace mt::coordinator {

// `path` with repeated '/', "." and trailing '/' removed and ".." folded lexically
// ("/a//b/./c/../" -> "/a/b"); the file system is not consulted. "" stays "".
std::string NormalizeDir(absl::string_view path);

// OK unless `holder` (a job that has not ended) saves into the same directory as `save_dir`
// (normalised); then FAILED_PRECONDITION naming the holder, its state and the ways out.
absl::Status CheckSaveDirFree(absl::string_view save_dir, const mt::v1::Job& holder);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOBS_SAVE_DIR_H_
