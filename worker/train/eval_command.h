// `mt-worker eval`: a checkpoint's loss and perplexity on held-out data, on this machine, one
// device (Megatron's evaluate-ppl run: --load, --data-path, --micro-batch-size,
// --context-length).
//
//   mt-worker eval CHECKPOINT --data-path PREFIX [--split 969,30,1] [--eval-iters N | --all]
//       [--micro-batch-size B] [--context-length S] [--seed S] [--device cpu|cuda[:N]]
//       [--dtype auto|fp32|bf16|fp16] [--attention auto|math|fused] [-o text|json]
//
// The data: the validation part of PREFIX.bin/.idx as --split divides its documents ("0,1,0"
// evaluates every document), cut into samples of S + 1 tokens by Megatron's GPT dataset with
// the data seed (the checkpoint's training seed by default: with the training run's split and
// sequence length these are the samples its evaluation drew from). --eval-iters N evaluates
// N micro-batches (default 100, Megatron's); --all every sample of the split once (a last
// partial micro-batch left out). S defaults
// to the checkpoint's sequence length, B to its micro-batch size.
// Output: loss, perplexity (exp(min(loss, 20)), as Megatron prints it), tokens evaluated
// (key=value, or one JSON object with -o json) on stdout.
// Exit codes: 0 done; 1 evaluation failed; 2 usage, checkpoint or data error.
#ifndef MT_WORKER_TRAIN_EVAL_COMMAND_H_
#define MT_WORKER_TRAIN_EVAL_COMMAND_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/engine/data_sources.h"
#include "worker/generate/evaluator.h"
#include "worker/generate/inference_model.h"

namespace mt::train {

// `args` are the arguments after "eval".
int RunEvalCommand(const std::vector<std::string>& args);
const char* EvalCommandUsage();

// What one evaluation computed, and on what.
struct EvalRun {
  generate::InferenceModel loaded;
  int64_t micro_batch_size = 0;
  int64_t context_length = 0;
  bool same_samples_as_training = false;
  generate::EvalResult result;
};

// The evaluation of `mt-worker eval ARGS` (args after "eval", without --help), also run by the
// rank of an eval job (inference_rank.h) so that both compute the same numbers. `on_batch` as
// generate::EvaluateLoss's. Errors name the flag; *usage_error says whether the input was at
// fault (exit code 2) rather than the evaluation (1).
absl::StatusOr<EvalRun> EvaluateFromArgs(const std::vector<std::string>& args,
                                         const std::function<void(int64_t)>& on_batch,
                                         bool* usage_error);
// The result as `mt-worker eval -o json` prints it (one line, no newline).
std::string EvalRunJson(const EvalRun& run);

// What an evaluation reads: the flags' values, defaults from the checkpoint's training spec.
struct EvalPlan {
  std::string prefix;
  std::string split;
  int64_t micro_batch = 0;
  int64_t context = 0;
  int64_t iters = 0;  // 0 = --all
  uint32_t seed = 0;
};
// The plan of `mt-worker eval ARGS` for a checkpoint trained with `training` whose model has
// `positions` positions; errors name the flag. Shared with a sharded eval job's ranks
// (sharded_eval.h), so that both read the same samples.
absl::StatusOr<EvalPlan> EvalPlanFromArgs(const std::vector<std::string>& argv,
                                          const mt::v1::JobSpec& training, int64_t positions);
// The held-out data of `plan` read `batch_rows` samples at a time (one micro-batch on one
// rank; micro-batch x DP for a global batch).
engine::EvalDataRequest EvalDataRequestFor(const EvalPlan& plan, const mt::v1::JobSpec& training,
                                           int64_t batch_rows);

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_EVAL_COMMAND_H_
