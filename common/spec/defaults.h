// Fills the defaults written beside the fields of mt.v1.JobSpec (proto/mt/v1/job_spec.proto),
// so that the spec the coordinator stores and hands to workers is complete and explicit.
// Thread-compatible free functions; no state, no I/O.
#ifndef MT_COMMON_SPEC_DEFAULTS_H_
#define MT_COMMON_SPEC_DEFAULTS_H_

#include "absl/status/status.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::spec {

// Megatron-LM's and mt's defaults, spelled out once.
inline constexpr char kDefaultJobName[] = "job";
inline constexpr int kDefaultMakeVocabSizeDivisibleBy = 128;
inline constexpr double kDefaultDropout = 0.1;
inline constexpr double kDefaultInitMethodStd = 0.02;
inline constexpr double kDefaultLayernormEpsilon = 1e-5;
inline constexpr long long kDefaultDdpBucketSize = 40000000;
inline constexpr double kDefaultWeightDecay = 0.01;
inline constexpr double kDefaultAdamBeta1 = 0.9;
inline constexpr double kDefaultAdamBeta2 = 0.999;
inline constexpr double kDefaultAdamEps = 1e-8;
inline constexpr double kDefaultSgdMomentum = 0.9;
inline constexpr double kDefaultClipGrad = 1.0;
inline constexpr double kDefaultInitialLossScale = 4294967296.0;  // 2^32
inline constexpr double kDefaultMinLossScale = 1.0;
inline constexpr int kDefaultLossScaleWindow = 1000;
inline constexpr int kDefaultHysteresis = 2;
inline constexpr unsigned long long kDefaultSeed = 1234;
inline constexpr char kDefaultSplit[] = "969,30,1";
inline constexpr int kDefaultNumWorkers = 2;
inline constexpr long long kDefaultEvalInterval = 1000;
inline constexpr long long kDefaultEvalIters = 100;
inline constexpr long long kDefaultLogInterval = 100;
inline constexpr int kDefaultMaxRestarts = 3;
inline constexpr int kDefaultHangTimeoutFloorSeconds = 60;
inline constexpr double kDefaultHangStepMultiplier = 10;
inline constexpr int kDefaultSaveLoadTimeoutSeconds = 1800;
inline constexpr int kDefaultDistributedTimeoutMinutes = 10;
inline constexpr double kDefaultStragglerThreshold = 1.5;
inline constexpr int kDefaultStragglerWindowSteps = 20;

// Sets every field that is unset (or 0 where the proto says "0 = ...") to its default. Idempotent.
// Every sub-message becomes present. Left as they are, because they depend on things this pure
// function cannot know:
//   - parallel.data_parallel_size and parallel.world_size when 0 (auto: decided at scheduling);
//   - training.global_batch_size when 0 and the data-parallel size is unknown (it becomes
//     micro_batch_size * DP when DP is explicit or world_size fixes it);
//   - model.vocab_size when 0 (the tokenizer's, read from the vocabulary file by the worker);
//   - model.kv_channels when hidden_size is not a multiple of num_attention_heads (the validator
//     reports that);
//   - optional fields without a default: lr_warmup_fraction, loss_scale.
// Defaults that derive from other fields (ffn_hidden_size = 4 * hidden_size,
// max_position_embeddings = seq_length, lr_decay_iters = train_iters, ...) use the values present
// when it runs, so run it after the front end has set everything.
void ApplyDefaults(mt::v1::JobSpec* spec);

// Resolves what ApplyDefaults leaves open once the job's data-parallel size is known (the
// coordinator calls it when it first places a job, `mt-worker train` with 1):
// training.global_batch_size, when 0, becomes micro_batch_size * data_parallel_size. After it
// the spec's batch is complete: the trainer reads it and derives nothing. A restart placed at
// another data-parallel size keeps the global batch (Megatron's semantics across a resize).
// Idempotent; the spec must have passed ApplyDefaults and ValidateSpec. INVALID_ARGUMENT when
// `data_parallel_size` < 1, when the spec fixes a different data-parallel size, or when the
// product overflows.
absl::Status ResolveForLayout(mt::v1::JobSpec* spec, int data_parallel_size);

}  // namespace mt::spec

#endif  // MT_COMMON_SPEC_DEFAULTS_H_
