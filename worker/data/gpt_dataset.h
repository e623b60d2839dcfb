// GPT training samples from Megatron indexed datasets (.bin/.idx), with Megatron-LM's semantics:
// GPTDataset (one split of one dataset: shuffled documents cut into seq_length + 1 token
// samples), BlendedDataset (several datasets mixed by weight), and BuildGPTDatasets, which turns
// --data-path / --split / --train-data-path ... and the run's sample budget into the train,
// valid and test datasets as Megatron's BlendedMegatronDatasetBuilder does. The index math is in
// gpt_indices.h; the indices are cached on disk (index_cache.h, FORMAT.md).
//
//   GPTDataConfig config;
//   config.blend = {{"data/web", "data/books"}, {0.7, 0.3}};
//   config.split = "969,30,1";
//   config.seq_length = 1024;
//   config.seed = 1234;
//   MT_ASSIGN_OR_RETURN(auto samples, TrainValidTestNumSamples(budget));
//   MT_ASSIGN_OR_RETURN(GPTDatasets ds, BuildGPTDatasets(config, samples));
//   std::vector<int32_t> tokens(ds.train->sample_length());
//   MT_RETURN_IF_ERROR(ds.train->Read(0, tokens.data()));   // seq_length + 1 token ids
//
// No LibTorch here: samples are plain int32 token ids; the trainer makes tensors.
#ifndef MT_WORKER_DATA_GPT_DATASET_H_
#define MT_WORKER_DATA_GPT_DATASET_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/data/indexed_dataset.h"
#include "worker/data/gpt_indices.h"

namespace mt::data {

// A fixed-length sequence of samples, each sample_length() token ids. Implementations are
// immutable once created and thread-safe: Read may be called from many threads at once.
class SampleDataset {
 public:
  virtual ~SampleDataset() = default;
  virtual int64_t size() const = 0;           // samples
  virtual int64_t sample_length() const = 0;  // tokens per sample: seq_length + 1
  // Sample `index` (0 <= index < size()) into out[0, sample_length()).
  virtual absl::Status Read(int64_t index, int32_t* out) const = 0;
  // Everything the samples depend on, as text; its SHA-256 names cache files.
  virtual const std::string& description() const = 0;

  absl::StatusOr<std::vector<int32_t>> Sample(int64_t index) const;
};

// What happened to a dataset's on-disk index cache when it was created.
enum class CacheOutcome {
  kDisabled,       // caching off: built in memory
  kLoaded,         // read from a valid cache file
  kBuiltAndSaved,  // missing, stale or damaged: built and written
  kBuiltNotSaved,  // built, but the cache could not be written (read-only data, ...): logged
};
absl::string_view CacheOutcomeName(CacheOutcome outcome);

// Where index caches go when no cache directory is given: "<directory of prefix>/cache".
std::string DefaultCacheDir(absl::string_view prefix);

struct GPTDatasetOptions {
  Split split = Split::kTrain;
  DocumentRange documents;  // the split's documents (sequences) in the indexed dataset
  // Samples wanted; the dataset holds at least these (whole epochs' worth). 0 = one epoch.
  int64_t num_samples = 0;
  int64_t seq_length = 0;  // >= 2; samples have seq_length + 1 tokens
  uint32_t seed = 1234;    // Megatron's --seed (numpy RandomState: 0 .. 2^32-1)
  bool use_cache = true;
  std::string cache_dir;  // empty: DefaultCacheDir(prefix)
};

// Megatron's GPTDataset for one split of one indexed dataset. Thread-safe once created.
class GPTDataset : public SampleDataset {
 public:
  static absl::StatusOr<std::unique_ptr<GPTDataset>> Create(
      std::shared_ptr<const IndexedDataset> data, const GPTDatasetOptions& options);

  // Samples in the index: plan().num_samples_total, at least the requested number (Megatron's
  // len(GPTDataset)).
  int64_t size() const override { return plan_.num_samples_total; }
  int64_t sample_length() const override { return options_.seq_length + kExtraTokens; }
  // Sample shuffle_index[index] of the un-shuffled sample order.
  absl::Status Read(int64_t index, int32_t* out) const override;
  const std::string& description() const override { return description_; }

  // Sample `position` of the un-shuffled order (the order of the sample index).
  absl::Status ReadUnshuffled(int64_t position, int32_t* out) const;

  const GPTDatasetOptions& options() const { return options_; }
  const IndexedDataset& data() const { return *data_; }
  const EpochPlan& plan() const { return plan_; }
  absl::Span<const int32_t> document_index() const { return document_index_; }
  // Flattened (document-index position, token offset) pairs, size() + 1 of them.
  absl::Span<const int64_t> sample_index() const { return sample_index_; }
  absl::Span<const int64_t> shuffle_index() const { return shuffle_index_; }
  CacheOutcome cache_outcome() const { return cache_outcome_; }
  const std::string& cache_path() const { return cache_path_; }  // empty when disabled

 private:
  GPTDataset() = default;
  absl::Status Build();

  std::shared_ptr<const IndexedDataset> data_;
  GPTDatasetOptions options_;
  std::string description_;
  EpochPlan plan_;
  std::vector<int32_t> document_index_;
  std::vector<int64_t> sample_index_;
  std::vector<int64_t> shuffle_index_;
  CacheOutcome cache_outcome_ = CacheOutcome::kDisabled;
  std::string cache_path_;
};

struct BlendedDatasetOptions {
  bool use_cache = true;
  std::string cache_dir;  // empty: no caching (blending indices are cheap to rebuild)
};

// Megatron's BlendedDataset: `size` samples drawn from `datasets` in proportion to `weights`
// (normalised here) by the greedy blending of BuildBlendingIndices. Fails if a dataset is too
// small for its share. Thread-safe once created.
class BlendedDataset : public SampleDataset {
 public:
  static absl::StatusOr<std::unique_ptr<BlendedDataset>> Create(
      std::vector<std::shared_ptr<const SampleDataset>> datasets, absl::Span<const double> weights,
      int64_t size, const BlendedDatasetOptions& options = {});

  int64_t size() const override { return static_cast<int64_t>(dataset_index_.size()); }
  int64_t sample_length() const override { return sample_length_; }
  absl::Status Read(int64_t index, int32_t* out) const override;
  const std::string& description() const override { return description_; }

  const std::vector<std::shared_ptr<const SampleDataset>>& datasets() const { return datasets_; }
  const std::vector<double>& weights() const { return weights_; }  // normalised
  absl::Span<const int16_t> dataset_index() const { return dataset_index_; }
  absl::Span<const int64_t> dataset_sample_index() const { return dataset_sample_index_; }
  CacheOutcome cache_outcome() const { return cache_outcome_; }

 private:
  BlendedDataset() = default;
  // Every draw exists in its dataset (Megatron finds out with an IndexError mid-training).
  absl::Status CheckDraws() const;

  std::vector<std::shared_ptr<const SampleDataset>> datasets_;
  std::vector<double> weights_;
  int64_t sample_length_ = 0;
  std::string description_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
  CacheOutcome cache_outcome_ = CacheOutcome::kDisabled;
};

// Dataset prefixes with optional weights: Megatron's blend ("w1 p1 w2 p2 ..." or "p1 p2 ...").
struct Blend {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // empty, or one per prefix (> 0; normalised when used)
};

// The data part of a training run, in Megatron's terms.
struct GPTDataConfig {
  // --data-path, divided by --split. Exclusive with blend_per_split.
  Blend blend;
  std::string split = "969,30,1";
  // --train-data-path / --valid-data-path / --test-data-path (a split without one is absent).
  std::array<std::optional<Blend>, kNumSplits> blend_per_split;
  int64_t seq_length = 0;
  uint32_t seed = 1234;
  bool use_cache = true;
  std::string cache_dir;  // --data-cache-path; empty: next to each dataset (DefaultCacheDir)
};

struct GPTDatasets {
  std::shared_ptr<const SampleDataset> train, valid, test;  // null when absent or not requested
  const std::shared_ptr<const SampleDataset>& operator[](Split s) const {
    return s == Split::kTrain ? train : (s == Split::kValid ? valid : test);
  }
};

// Megatron's BlendedMegatronDatasetBuilder.build for GPT, given the samples each split needs
// (TrainValidTestNumSamples):
//  - one prefix without weights (a single --data-path entry): a GPTDataset per split;
//  - weighted prefixes: per prefix and split a GPTDataset of ceil(n * w * 1.005) samples
//    (BlendedDatasetSizes), blended into exactly n samples;
//  - several prefixes without weights: one epoch of each, blended by their sizes into
//    min(n, sum of sizes) samples.
// A split that is absent (weight 0, or no per-split path) or asked for 0 samples is null. Each
// indexed dataset is opened once and shared by its splits.
absl::StatusOr<GPTDatasets> BuildGPTDatasets(const GPTDataConfig& config,
                                             const std::array<int64_t, kNumSplits>& num_samples);

}  // namespace mt::data

#endif  // MT_WORKER_DATA_GPT_DATASET_H_
