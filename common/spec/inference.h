// Evaluation and generation jobs (`mtctl eval`, `mtctl generate`; docs/inference.md): the
// checks of their tasks at the coordinator's API, the spec of the job that runs one,
// and the `mt-train eval|generate` arguments its rank runs (so that a job computes exactly what
// the local `mt-worker eval|generate` does with the same flags).
// Pure functions; no LibTorch, no I/O.
#ifndef MT_COMMON_SPEC_INFERENCE_H_
#define MT_COMMON_SPEC_INFERENCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mt/v1/checkpoint.pb.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::spec {

// Limits at the API (the local commands allow more; a service bounds what one call holds).
inline constexpr int64_t kMaxPromptBytes = 1 << 20;
inline constexpr int64_t kMaxNewTokens = 65536;
inline constexpr int64_t kMaxSamples = 64;
inline constexpr int64_t kMaxEvalIters = int64_t{1} << 30;
inline constexpr int64_t kMaxEvalMicroBatch = 1 << 16;
inline constexpr int32_t kMaxEvalParallelSize = 1024;

// INVALID_ARGUMENT naming the flag (--data-path, --split, --eval-iters, --all,
// --micro-batch-size, --context-length, --quantize, --tensor-model-parallel-size,
// --pipeline-model-parallel-size, --data-parallel-size) and its range; `max_positions` is the
// checkpoint's. --quantize int8 only on one rank.
absl::Status ValidateEvalTask(const mt::v1::EvalTask& task, int64_t max_positions);
// INVALID_ARGUMENT naming `flag` unless 1 <= size <= kMaxEvalParallelSize (mtctl checks a
// flag's value with it before narrowing it to the task's field).
absl::Status ValidateEvalParallelSize(const char* flag, int64_t size);
// The ranks of an eval task: TP x PP x DP (each 0 = 1).
int64_t EvalWorldSize(const mt::v1::EvalTask& task);
// The layout of an inference job: an eval task's sizes (0 = 1); a generation task's TP size
// (0 = 1) with PP = DP = 1.
mt::v1::ParallelSpec InferenceLayout(const mt::v1::InferenceSpec& inference);
// INVALID_ARGUMENT naming the flag (--prompt, --max-new-tokens, --temperature, --top-k,
// --top-p, --stop, -n, --quantize, --tensor-model-parallel-size: the range of
// ValidateEvalParallelSize). --quantize int8 only on one rank.
absl::Status ValidateGenerateTask(const mt::v1::GenerateTask& task);

// The spec of the job that evaluates or generates from the checkpoint in `dir` whose manifest
// is `manifest`: the training job's spec from the manifest (FAILED_PRECONDITION when it holds
// none, e.g. an import of a Hugging Face directory) on InferenceLayout's ranks (the global
// batch one micro-batch per DP rank), loading `dir`, saving nothing, never restarted, no
// TensorBoard; an eval job's data path and split are the task's. `inference` carries the task
// (checked here as above, and its TP size against the manifest's attention heads and padded
// vocabulary, which its ranks split as they are: INVALID_ARGUMENT naming
// --tensor-model-parallel-size) and the catalog id.
absl::StatusOr<mt::v1::JobSpec> InferenceJobSpec(const mt::v1::CheckpointManifest& manifest,
                                                 const std::string& dir,
                                                 mt::v1::InferenceSpec inference,
                                                 const std::string& name, int32_t priority,
                                                 mt::v1::DeviceKind device);

// What ValidateSpec adds for a spec with `inference` (empty for other specs): the task's
// checks above; InferenceLayout's parallel sizes; no save_dir; checkpoint.load_dir set and
// equal to inference.checkpoint_dir; an eval job's one data path equal to its task's. So the
// fields the coordinator confines to its allowed roots (load_dir, data paths) are the ones the
// rank reads.
std::vector<std::string> ListInferenceProblems(const mt::v1::JobSpec& spec);

// The arguments after `mt-train eval` / `mt-train generate` for the job's task: CHECKPOINT
// (checkpoint.load_dir) first, then the task's flags (an eval job's data path and split from
// spec.data), then `extra` (the rank's --device); -o json.
std::vector<std::string> EvalCommandArgs(const mt::v1::JobSpec& spec,
                                         const std::vector<std::string>& extra);
std::vector<std::string> GenerateCommandArgs(const mt::v1::JobSpec& spec,
                                             const std::vector<std::string>& extra);

}  // namespace mt::spec

#endif  // MT_COMMON_SPEC_INFERENCE_H_
