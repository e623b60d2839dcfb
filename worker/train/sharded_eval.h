// The evaluation of an eval job past one rank (`mtctl eval --tensor-model-parallel-size T
// --pipeline-model-parallel-size P --data-parallel-size D`): every rank of the layout builds
// the training engine for its place without an optimizer (TrainerOptions::evaluation_only: the
// model's weights alone: 2 bytes a parameter in bf16 where training holds 14 or more), restores the
// checkpoint's weights into it (resharded to T and P as a training job's resume would be), and runs
// the engine's evaluation, which is the one the training loop runs: TP ranks split each layer, PP
// stages pass the activations on, DP ranks take their micro-batch of every global batch and average
// the losses.
//
// The samples are those of `mt-worker eval` with the same flags (eval_command.h's plan and
// data), read a global batch of micro-batch x D samples at a time: with D = 1 exactly the
// local command's; with D > 1 those of the local command's --micro-batch-size D x B. So the
// loss equals the local command's on the same samples (up to the summation order of the
// sharded matrix products: tests/integration/inference_jobs_test.cc bounds it).
#ifndef MT_WORKER_TRAIN_SHARDED_EVAL_H_
#define MT_WORKER_TRAIN_SHARDED_EVAL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/checkpoint/trainer_state.h"
#include "worker/engine/trainer.h"

namespace mt::train {

struct ShardedEvalOptions {
  checkpoint::LoadOptions load;        // this rank's TP/PP place, the staging device
  checkpoint::RestoreOptions restore;  // this rank's TP place (weights only is forced)
  engine::TrainerOptions trainer;      // device, process groups, collectives, activity
  int dp_rank = 0;
  int dp_size = 1;
};

struct ShardedEvalRun {
  std::string dir;  // the checkpoint evaluated
  int64_t step = 0;
  engine::EvalMetrics metrics;  // the DP ranks' mean loss, on every rank
  int64_t tokens = 0;           // predicted tokens of all ranks
  int64_t micro_batch_size = 0;
  int64_t context_length = 0;
  bool same_samples_as_training = false;
};

// `spec` is the job's (common/spec/inference.h InferenceJobSpec): checkpoint.load_dir, the
// task in spec.inference().eval(), the layout in spec.parallel(). Errors: NOT_FOUND when the
// directory holds no checkpoint; INVALID_ARGUMENT naming the flag for a bad task, a split
// without validation documents, or (--all) one too short for a global batch; the engine's and
// the checkpoint's errors otherwise. As in Megatron, --eval-iters past the split's samples
// reads them again (the dataset holds as many epochs as the iterations need).
absl::StatusOr<ShardedEvalRun> EvaluateSharded(const mt::v1::JobSpec& spec,
                                               const ShardedEvalOptions& options);

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_SHARDED_EVAL_H_
