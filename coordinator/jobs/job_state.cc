#include "coordinator/jobs/job_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mt::coordinator {
namespace {

using S = mt::v1::JobState;

// The table. Keep it in sync with the diagram in job_state.h.
constexpr std::pair<S, S> kEdges[] = {
    {mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_SCHEDULED},
    {mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_CANCELLED},
    {mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_FAILED},  // e.g. can never be placed
    {mt::v1::JOB_STATE_SCHEDULED, mt::v1::JOB_STATE_RUNNING},
    {mt::v1::JOB_STATE_SCHEDULED, mt::v1::JOB_STATE_RESTARTING},
    {mt::v1::JOB_STATE_SCHEDULED, mt::v1::JOB_STATE_FAILED},
    {mt::v1::JOB_STATE_SCHEDULED, mt::v1::JOB_STATE_CANCELLED},
    {mt::v1::JOB_STATE_SCHEDULED,
     mt::v1::JOB_STATE_SUCCEEDED},  // ranks finished before all said "training"
    {mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_SUCCEEDED},
    {mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_RESTARTING},
    {mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_FAILED},
    {mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_CANCELLED},
    // A restart goes through the queue: it may have to wait for capacity or other workers.
    {mt::v1::JOB_STATE_RESTARTING, mt::v1::JOB_STATE_PENDING},
    {mt::v1::JOB_STATE_RESTARTING, mt::v1::JOB_STATE_FAILED},
    {mt::v1::JOB_STATE_RESTARTING, mt::v1::JOB_STATE_CANCELLED},
};

}  // namespace

std::string ShortName(mt::v1::JobState state) {
  std::string s = mt::v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

bool IsTerminal(mt::v1::JobState state) {
  return state == mt::v1::JOB_STATE_SUCCEEDED || state == mt::v1::JOB_STATE_FAILED ||
         state == mt::v1::JOB_STATE_CANCELLED;
}

absl::Status CheckTransition(mt::v1::JobState from, mt::v1::JobState to) {
  for (const auto& [a, b] : kEdges) {
    if (a == from && b == to) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("a ", ShortName(from), " job cannot become ", ShortName(to)));
}

std::vector<std::pair<mt::v1::JobState, mt::v1::JobState>> AllowedTransitions() {
  return {std::begin(kEdges), std::end(kEdges)};
}

}  // namespace mt::coordinator
