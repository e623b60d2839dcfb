// The mt-worker --state-file: the worker id and the credential the coordinator issued with it,
// kept across daemon restarts so that the coordinator recognises the daemon (FORMAT.md,
// "Worker state file"). Pure parsing and formatting; thread-safe.
#ifndef MT_WORKER_DAEMON_STATE_FILE_H_
#define MT_WORKER_DAEMON_STATE_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt::worker {

struct WorkerState {
  std::string worker_id;
  std::string credential;  // empty in a file of an older daemon (the id alone)
};

inline constexpr char kWorkerStateMagic[] = "mt-worker-state";
inline constexpr int kWorkerStateVersion = 1;

// The file's text: magic and version, then one "key value" line each.
std::string FormatWorkerState(const WorkerState& state);
// Parses FormatWorkerState's text, or a bare id (the format before credentials).
// INVALID_ARGUMENT names the line and says to remove the file.
absl::StatusOr<WorkerState> ParseWorkerState(absl::string_view text);

}  // namespace mt::worker

#endif  // MT_WORKER_DAEMON_STATE_FILE_H_
