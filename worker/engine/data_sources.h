// The trainer's BatchSources for a job spec: Megatron's GPT datasets over .bin/.idx files
// (worker/data: GPTDataset / BlendedDataset, read in MegatronPretrainingSampler order), or
// synthetic tokens. No LibTorch here.
#ifndef MT_WORKER_ENGINE_DATA_SOURCES_H_
#define MT_WORKER_ENGINE_DATA_SOURCES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "worker/engine/batch_source.h"

namespace mt::v1 {
class JobSpec;
}  // namespace mt::v1

namespace mt::engine {

struct DataSources {
  std::unique_ptr<BatchSource> train;
  std::unique_ptr<BatchSource> valid;  // null when the spec has no validation data
};

// True when this build has worker/data (DataSourcesFromSpec works).
bool HaveDatasetLoader();

// From spec.data (after ApplyDefaults/ValidateSpec), for a single data-parallel rank; the
// training loader starts after `consumed_samples` (a checkpoint's), the validation loader at
// 0. Builds (or loads from the cache) Megatron's sample indices, which may take a while for a
// large corpus. Errors from worker/data; kUnimplemented in a build without it.
// With data parallelism, each of the `dp_size` ranks gets its slice of every global batch
// (Megatron's MegatronPretrainingSampler): rank r takes samples [r*micro, (r+1)*micro) of each
// run of micro*dp_size samples.
absl::StatusOr<DataSources> DataSourcesFromSpec(const mt::v1::JobSpec& spec,
                                                int64_t consumed_samples = 0, int dp_rank = 0,
                                                int dp_size = 1);

// Deterministic random tokens over model.vocab_size (50257 when 0): a repeating sequence of
// eight global batches for training (the loss visibly falls) and another one for validation.
// The training source starts after `consumed_samples` (a checkpoint's).
absl::StatusOr<DataSources> SyntheticDataSources(const mt::v1::JobSpec& spec, int dp_rank = 0,
                                                 int dp_size = 1, int64_t consumed_samples = 0);

// Held-out data for evaluating a checkpoint (`mt-worker eval`): the validation part of the
// documents at `prefix` as Megatron's --split divides them ("969,30,1"; "0,1,0" = every
// document), cut into GPT samples of seq_length + 1 tokens by Megatron's GPT dataset (shuffled
// with `seed`, indices cached next to the data), read micro_batch_size samples at a time.
struct EvalDataRequest {
  std::string prefix;
  std::string split = "969,30,1";
  int64_t seq_length = 0;
  uint32_t seed = 1234;
  int64_t micro_batch_size = 1;
  // Samples to evaluate; 0 = one epoch of the split (every sample once).
  int64_t num_samples = 0;
  // The checkpoint's job spec (may be null). When its data is this one prefix with the same
  // split, sequence length and seed, the validation dataset is built with the size its
  // training run used, so that the samples are, in order, the ones its evaluations drew (the
  // first evaluation took the first eval_iters * global_batch_size).
  const mt::v1::JobSpec* training_spec = nullptr;
};
struct EvalData {
  std::unique_ptr<BatchSource> source;    // answers OUT_OF_RANGE after the last full micro-batch
  int64_t micro_batches = 0;              // it yields in all (at most)
  bool same_samples_as_training = false;  // training_spec matched (see above)
};
// Errors from worker/data; INVALID_ARGUMENT naming --split when the split has no validation
// documents; kUnimplemented in a build without worker/data.
absl::StatusOr<EvalData> EvaluationDataSource(const EvalDataRequest& request);

// Rank `dp_rank`'s slice of `source`: each Next(micro) reads micro*dp_size samples from it and
// keeps rows [dp_rank*micro, (dp_rank+1)*micro). Thread-compatible.
class DataParallelSlice : public BatchSource {
 public:
  DataParallelSlice(std::unique_ptr<BatchSource> source, int dp_rank, int dp_size)
      : source_(std::move(source)), dp_rank_(dp_rank), dp_size_(dp_size) {}
  absl::StatusOr<TokenBatch> Next(int64_t num_samples) override;

 private:
  std::unique_ptr<BatchSource> source_;
  int dp_rank_;
  int dp_size_;
};

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_DATA_SOURCES_H_
