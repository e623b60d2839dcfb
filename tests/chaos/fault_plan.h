// The chaos soak's randomness (tests/chaos/README.md): which fault comes next and the random
// numbers of its injection (victim, timing), all from one seeded generator so that a run is
// repeated by its seed (the scheduling of real processes still varies). Every kind comes once
// per round, the rounds in seeded orders, so that a short run covers every kind. Pure; not
// thread-safe.
#ifndef MT_TESTS_CHAOS_FAULT_PLAN_H_
#define MT_TESTS_CHAOS_FAULT_PLAN_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/time/time.h"

namespace mt::chaos {

enum class FaultKind {
  kKillRank,            // kill -9 of one trainer process (a rank)
  kKillWorker,          // kill -9 of a worker daemon (its rank dies with it), then started again
  kRestartCoordinator,  // SIGKILL or SIGTERM of the coordinator, started again after a pause
  kStopRank,            // SIGSTOP of a rank: SIGCONT before the hang floor, or left to the detector
  kFillDisk,            // the checkpoint file system filled until a save fails, then freed
  kCutNetwork,          // a worker node's link down for a few seconds, then up
};
inline constexpr int kFaultKinds = 6;

// "kill_rank", "kill_worker", "restart_coordinator", "stop_rank", "fill_disk", "cut_network".
const char* FaultName(FaultKind kind);

class FaultPlan {
 public:
  explicit FaultPlan(uint64_t seed) : rng_(seed) {}

  // The next kind: each of the kFaultKinds once per round, in a random order per round.
  FaultKind NextKind();
  // Uniform in [lo, hi] (lo <= hi); the same on every standard library (no <random>
  // distributions, whose results differ between implementations).
  int64_t Uniform(int64_t lo, int64_t hi);
  absl::Duration UniformDuration(absl::Duration lo, absl::Duration hi);  // millisecond steps
  bool Coin() { return Uniform(0, 1) == 1; }

 private:
  std::mt19937_64 rng_;
  std::vector<FaultKind> round_;
  size_t next_ = 0;
};

}  // namespace mt::chaos

#endif  // MT_TESTS_CHAOS_FAULT_PLAN_H_
