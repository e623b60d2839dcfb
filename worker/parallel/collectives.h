// What the training step needs from data parallelism, as a narrow interface (DESIGN.md §8.4):
// scalars averaged for reporting. (Gradients are reduced by the optimizer, which owns the
// gradient buffers: worker/engine/optimizer.h, worker/parallel/grad_reducer.h.) `LocalCollectives`
// (a world of one) sits beside it; `ProcessGroupCollectives` (dist.h) runs over c10d.
// Implementations are used by one training thread at a time.
#ifndef MT_WORKER_PARALLEL_COLLECTIVES_H_
#define MT_WORKER_PARALLEL_COLLECTIVES_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mt::parallel {

class Collectives {
 public:
  virtual ~Collectives() = default;
  // Ranks in this rank's data-parallel group, and this rank's index in it.
  virtual int dp_size() const = 0;
  virtual int dp_rank() const = 0;
  // The mean of `value` over the DP group (e.g. the step's loss).
  virtual absl::StatusOr<double> AverageScalar(double value) = 0;
  // The maximum over the whole job (e.g. "any rank saw inf": skip the step everywhere).
  // (Both are timed with the rest of the rank's communication: comm_stats.h.)
  virtual absl::StatusOr<double> MaxScalarOverWorld(double value) = 0;
};

// A world of one: nothing to reduce.
class LocalCollectives : public Collectives {
 public:
  int dp_size() const override { return 1; }
  int dp_rank() const override { return 0; }
  absl::StatusOr<double> AverageScalar(double value) override { return value; }
  absl::StatusOr<double> MaxScalarOverWorld(double value) override { return value; }
};

}  // namespace mt::parallel

#endif  // MT_WORKER_PARALLEL_COLLECTIVES_H_
