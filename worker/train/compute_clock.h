// A rank's compute time per step for straggler detection (coordinator/jobs/straggler_tracker.h),
// measured on the training thread from the trainer's activity changes (worker/engine/
// activity.h): the time spent in forward and backward passes, less the collectives that block
// them (tensor-parallel mappings, pipeline send/recv, the tied-embedding sum: synchronous ops
// whose spans are time the thread waited).
//
// Why not the step's time less every collective span (the measurement before, issue 19): the
// DP gradient buckets are asynchronous; their spans run from the bucket's launch during the
// last backward to the wait in the optimizer, so with overlapped reduction and several buckets
// they also cover backward compute, on every rank, and subtracting them under-counts it (more
// so on fast ranks, inflating a straggler's ratio). The DP wait (where a fast rank waits for a
// straggler) falls in the optimizer phase, which is left out with the update's own compute
// (the same on every rank); data waits, evaluation, saves and the stop vote are left out too.
//
// Thread-compatible: the training thread calls both methods.
#ifndef MT_WORKER_TRAIN_COMPUTE_CLOCK_H_
#define MT_WORKER_TRAIN_COMPUTE_CLOCK_H_

#include <chrono>
#include <string>

#include "worker/engine/activity.h"

namespace mt::train {

class ComputeClock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // The trainer moved to `activity` at `now`.
  void OnActivity(engine::Activity activity, TimePoint now);
  // The compute seconds since the previous Take, less `blocking_comm_seconds` (the spans of
  // the collectives that ran inside those passes; BlocksThePasses), at least 0.
  double Take(double blocking_comm_seconds, TimePoint now);

  // Whether a collective of `group` (parallel::CommGroupName) runs synchronously inside the
  // forward and backward passes ("tp", "pp", "embedding"), so that its span is time the
  // passes waited.
  static bool BlocksThePasses(const std::string& group);

 private:
  bool computing_ = false;
  TimePoint since_{};
  double seconds_ = 0;
};

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_COMPUTE_CLOCK_H_
