#include "worker/daemon/state_file.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mt::worker {
namespace {

absl::Status Bad(int line, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--state-file line ", line, ": ", why,
                                                 " (remove the file to register as a new worker)"));
}

}  // namespace

std::string FormatWorkerState(const WorkerState& state) {
  return absl::StrCat(kWorkerStateMagic, " ", kWorkerStateVersion, "\nworker_id ", state.worker_id,
                      "\ncredential ", state.credential, "\n");
}

absl::StatusOr<WorkerState> ParseWorkerState(absl::string_view text) {
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::StripAsciiWhitespace(text), '\n', absl::SkipWhitespace());
  WorkerState state;
  if (lines.size() == 1 && !absl::StartsWith(lines[0], kWorkerStateMagic)) {
    state.worker_id = std::string(absl::StripAsciiWhitespace(lines[0]));  // an older daemon's
    return state;
  }
  const std::string header = absl::StrCat(kWorkerStateMagic, " ", kWorkerStateVersion);
  if (lines.empty() || absl::StripAsciiWhitespace(lines[0]) != header) {
    return Bad(1, absl::StrCat("expected '", header, "'"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(absl::StripAsciiWhitespace(lines[i]), absl::MaxSplits(' ', 1));
    if (kv.first == "worker_id") {
      state.worker_id = std::string(kv.second);
    } else if (kv.first == "credential") {
      state.credential = std::string(kv.second);
    } else {
      return Bad(static_cast<int>(i) + 1, absl::StrCat("unknown key '", kv.first, "'"));
    }
  }
  if (state.worker_id.empty()) return Bad(static_cast<int>(lines.size()), "no worker_id line");
  return state;
}

}  // namespace mt::worker
