// What a trainer is doing inside its loop, for progress beacons (worker/report/
// progress_beacon.h): the hang detector names the phase a stuck rank was in. A listener is
// called on the training thread at every change, and again at each micro-batch of an
// evaluation (each global batch through a pipeline), so that a rank's beacon keeps moving
// through an evaluation longer than the hang timeout (the detector counts every beacon as a
// move); it must be cheap (no syscalls).
#ifndef MT_WORKER_ENGINE_ACTIVITY_H_
#define MT_WORKER_ENGINE_ACTIVITY_H_

#include <cstdint>
#include <functional>

namespace mt::engine {

enum class Activity {
  kData,     // reading a micro-batch
  kForward,  // forward passes (the whole pipeline schedule with pipeline parallelism)
  kBackward,
  kOptimizer,  // gradient reduction over DP and the update
  kEval,
  kCollective,  // a collective between steps (the session's stop vote)
  kSave,        // the session's checkpoint saves (worker/train/session.h)
  kLoad,        // the session's checkpoint restore
};

// (activity, the step it belongs to: the one being trained, or the last trained for kEval).
using ActivityListener = std::function<void(Activity, int64_t)>;

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_ACTIVITY_H_
