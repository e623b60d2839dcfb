// Loss and perplexity of a model on held-out samples, as the training loop evaluates
// (engine::Trainer::Evaluate): each micro-batch's mean next-token loss through
// GptModel::LossOnSample in eval mode without gradients, averaged over the micro-batches
// (all of the same size, so this is the mean over every token evaluated).
//
// No LibTorch in this header. Thread-compatible.
#ifndef MT_WORKER_GENERATE_EVALUATOR_H_
#define MT_WORKER_GENERATE_EVALUATOR_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "worker/engine/batch_source.h"

namespace mt::model {
class GptModel;
}  // namespace mt::model

namespace mt::generate {

struct EvalResult {
  double loss = 0.0;
  double perplexity = 0.0;  // exp(min(loss, 20)), as Megatron and the trainer print it
  int64_t tokens = 0;       // predicted tokens (micro-batches * micro_batch_size * seq_length)
  int64_t batches = 0;      // micro-batches evaluated
  double seconds = 0.0;
};

// `batches` micro-batches of `micro_batch_size` samples from `source`; batches < 0 = until the
// source answers OUT_OF_RANGE (it ran out). Errors: a sample longer than the model's positions
// or a token outside its vocabulary (INVALID_ARGUMENT), the source's errors, no batch at all
// (OUT_OF_RANGE), LibTorch errors as INTERNAL. `on_batch` (optional) hears the number of
// micro-batches done after each one (a rank of an eval job beacons its progress with it).
absl::StatusOr<EvalResult> EvaluateLoss(model::GptModel& gpt, engine::BatchSource& source,
                                        int64_t micro_batch_size, int64_t batches,
                                        const std::function<void(int64_t)>& on_batch = {});

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_EVALUATOR_H_
