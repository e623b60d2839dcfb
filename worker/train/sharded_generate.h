// The generation of a generation job past one rank (`mtctl generate
// --tensor-model-parallel-size T`): T ranks, tensor parallelism only (PP = DP = 1). Every rank
// loads its TP shard of the checkpoint (resharded to T, the vocabulary keeping the
// checkpoint's padding, as an eval job's ranks do) and runs the generation of `mt-worker
// generate` with the task's flags on it (generate_command.h; the same prompt, tokenizer and
// sampling): the ranks decode together over their local heads with a KV cache of those heads,
// the logits gathered over the TP group, and TP rank 0 samples each token and broadcasts it
// (worker/generate/generator.h). So every rank produces the same samples, and greedy text
// equals the one-device command's (up to the last bits of the sharded sums:
// tests/integration/inference_jobs_test.cc checks it token for token in fp32).
//
// Only TP rank 0 reports the text (inference_rank.h); the others send beacons.
#ifndef MT_WORKER_TRAIN_SHARDED_GENERATE_H_
#define MT_WORKER_TRAIN_SHARDED_GENERATE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/generate/generator.h"
#include "worker/generate/inference_model.h"
#include "worker/train/generate_command.h"

namespace mt::parallel {
class ProcessGroups;  // worker/parallel/process_groups.h
}  // namespace mt::parallel

namespace mt::train {

struct ShardedGenerateOptions {
  std::string device = "cpu";        // the rank's device ("cpu", "cuda:0")
  generate::TensorParallelPlace tp;  // this rank's TP index, the group's size and the group
};

// This rank's TP place in `groups` (the group shares their ownership).
generate::TensorParallelPlace TensorParallelPlaceOf(
    std::shared_ptr<parallel::ProcessGroups> groups);

// `spec` is the job's (common/spec/inference.h InferenceJobSpec): checkpoint.load_dir, the task
// in spec.inference().generate(), the layout in spec.parallel(). Every TP rank of the job calls
// it; `on_text` (optional) hears each sample's new text on every rank (the caller decides who
// reports it). Errors: INVALID_ARGUMENT for a layout other than TP ranks only, or whose TP
// size is not options.tp.size; GenerateFromArgs's otherwise (the flag named; a checkpoint
// whose heads or padded vocabulary do not split over the ranks names
// --tensor-model-parallel-size); INTERNAL when a collective fails (a peer gone).
absl::StatusOr<GenerateRun> GenerateSharded(const mt::v1::JobSpec& spec,
                                            const ShardedGenerateOptions& options,
                                            const generate::TextCallback& on_text);

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_SHARDED_GENERATE_H_
