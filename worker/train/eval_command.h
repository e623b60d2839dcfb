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

#include <string>
#include <vector>

namespace mt::train {

// `args` are the arguments after "eval".
int RunEvalCommand(const std::vector<std::string>& args);
const char* EvalCommandUsage();

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_EVAL_COMMAND_H_
