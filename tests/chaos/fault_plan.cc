#include "tests/chaos/fault_plan.h"

#include <utility>

namespace mt::chaos {

const char* FaultName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKillRank:
      return "kill_rank";
    case FaultKind::kKillWorker:
      return "kill_worker";
    case FaultKind::kRestartCoordinator:
      return "restart_coordinator";
    case FaultKind::kStopRank:
      return "stop_rank";
    case FaultKind::kFillDisk:
      return "fill_disk";
    case FaultKind::kCutNetwork:
      return "cut_network";
  }
  return "unknown";
}

int64_t FaultPlan::Uniform(int64_t lo, int64_t hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  // span == 0: the whole 64-bit range.
  return span == 0 ? static_cast<int64_t>(rng_()) : lo + static_cast<int64_t>(rng_() % span);
}

absl::Duration FaultPlan::UniformDuration(absl::Duration lo, absl::Duration hi) {
  return absl::Milliseconds(Uniform(absl::ToInt64Milliseconds(lo), absl::ToInt64Milliseconds(hi)));
}

FaultKind FaultPlan::NextKind() {
  if (next_ == round_.size()) {
    round_.clear();
    for (int k = 0; k < kFaultKinds; ++k) round_.push_back(static_cast<FaultKind>(k));
    // Fisher-Yates with this plan's own Uniform.
    for (int i = kFaultKinds - 1; i > 0; --i) std::swap(round_[i], round_[Uniform(0, i)]);
    next_ = 0;
  }
  return round_[next_++];
}

}  // namespace mt::chaos
