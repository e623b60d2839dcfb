// The optimizer's update on a CUDA stream of its own, part by part in the order the next
// forward needs the parameters, so that the update overlaps that forward (issue #16: AdamW is a
// memory-bound pass over 28 bytes a parameter, 8% of a GPT 1.3B step on an H200, and the
// forward's first layers need only their own parameters). MixedPrecisionOptimizer owns one
// when OptimizerConfig::overlap_update applies (optimizer.h).
//
// The protocol, on the device's current ("main") stream and the side stream:
//   Run:      the side stream waits for the main stream's work so far (the gradients, the norm,
//             the clip coefficient), then runs the update of part 0, 1, ... and after each
//             records that part's event.
//   WaitPart: the main stream waits for the event of part p (and so for parts 0..p: the side
//             stream runs them in order). Called just before part p of a forward runs (the
//             model's forward pre-hook). Inside a CUDA graph capture the wait becomes an
//             external event-wait node: each replay waits for the event's latest record
//             before the replay was launched, i.e. the update queued last.
//   WaitAll:  the main stream waits for the whole update (anything reading or writing the
//             state: checkpoints, evaluation through Trainer::model(), the next update).
// An event never recorded (before the first update) is waited for as done.
//
// Memory: tensors the update reads that were allocated on the main stream and may be freed
// before the side stream is done with them (the per-parameter gradients, the step's scalars)
// are passed to Run as `hold`: the caching allocator does not reuse their blocks before the
// side stream's work queued so far is done (Tensor::record_stream).
//
// Only in a build against a CUDA LibTorch (Available()); Create fails elsewhere.
// Thread-compatible; WaitPart may run on autograd's threads (a recomputed layer's pre-hook in
// backward) while nothing else runs.
#ifndef MT_WORKER_ENGINE_UPDATE_STREAM_H_
#define MT_WORKER_ENGINE_UPDATE_STREAM_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace mt::engine {

class UpdateStream {
 public:
  // Whether this build can run one (a CUDA LibTorch).
  static bool Available();
  // A side stream and `parts` events (1 to 4096) on CUDA device `device`.
  static absl::StatusOr<std::unique_ptr<UpdateStream>> Create(const torch::Device& device,
                                                              int64_t parts);
  // Waits (on the host) for the side stream's work: what it reads may be freed afterwards.
  ~UpdateStream();
  UpdateStream(const UpdateStream&) = delete;
  UpdateStream& operator=(const UpdateStream&) = delete;

  int64_t parts() const { return parts_; }

  // `update(p)` for p = 0 .. parts() - 1 with the side stream current, each followed by part
  // p's event (file comment). Not inside a capture.
  void Run(const std::function<void(int64_t part)>& update, const std::vector<torch::Tensor>& hold);
  // The current stream waits for the update of parts 0 .. `part` (clamped to the parts there
  // are); an external wait node while the current stream is being captured.
  void WaitPart(int64_t part);
  // The current stream waits for the whole update.
  void WaitAll() { WaitPart(parts_ - 1); }
  // Updates Run has queued since this object was made.
  int64_t runs() const { return runs_; }

 private:
  struct Impl;
  UpdateStream(std::unique_ptr<Impl> impl, int64_t parts);

  std::unique_ptr<Impl> impl_;
  int64_t parts_ = 0;
  int64_t runs_ = 0;
};

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_UPDATE_STREAM_H_
