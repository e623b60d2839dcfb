// The index math of Megatron-LM's GPT datasets, as pure functions (no I/O): how --split divides
// a dataset, how many samples each split needs, how many epochs cover them, and the three
// indices of a GPTDataset (document, sample, shuffle) and of a BlendedDataset (dataset, dataset
// sample). Sources: megatron/core/datasets/{blended_megatron_dataset_config, utils,
// blended_megatron_dataset_builder, gpt_dataset, helpers.cpp} and megatron/training/training.py.
// The random draws reproduce numpy's RandomState (numpy_random.h), so for the same seed and
// dataset the indices equal Megatron's.
//
// Terms. A "document" here is what Megatron's GPTDataset calls one: an entry of the indexed
// dataset's sequence table (GPTDataset.numel_low_level_dataset counts sequences). With
// preprocess_data.py's default (no --split-sentences) there is one sequence per document, so the
// two agree; with --split-sentences Megatron splits and shuffles sentences, and so do we.
//
// A sample is seq_length + 1 consecutive tokens of the shuffled document stream (the extra token
// gives the labels' last position: Megatron's add_extra_token_to_sequence, always on here);
// consecutive samples share one token. Incomplete trailing samples are dropped (Megatron's
// drop_last_partial_sequence, its default for every split).
//
// Thread-compatible free functions.
#ifndef MT_WORKER_DATA_GPT_INDICES_H_
#define MT_WORKER_DATA_GPT_INDICES_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/data/numpy_random.h"

namespace mt::data {

enum class Split : int { kTrain = 0, kValid = 1, kTest = 2 };
inline constexpr int kNumSplits = 3;
absl::string_view SplitName(Split split);  // "train", "valid", "test" (Megatron's Split names)

// Megatron's add_extra_token_to_sequence: a sample holds seq_length + 1 tokens.
inline constexpr int64_t kExtraTokens = 1;
// Megatron's separate_final_epoch threshold: a last epoch used for fewer than 80% of its samples
// is shuffled on its own, so that its few samples do not all land early in training.
inline constexpr double kSeparateFinalEpochThreshold = 0.80;

// numpy.sum of a float64 array (pairwise summation, bit-exact) and Megatron's normalize(): w/sum.
double NumpySum(absl::Span<const double> values);
std::vector<double> Normalize(absl::Span<const double> weights);

// Python's round() for doubles: to nearest, ties to even.
double RoundHalfEven(double x);

// Megatron's parse_and_normalize_split: up to three non-negative numbers separated by ',' or '/'
// ("969,30,1", "99/1"), missing ones 0, at least one positive; returned normalised to sum 1.
absl::StatusOr<std::array<double, kNumSplits>> ParseSplit(absl::string_view text);

// A half-open range of documents [begin, end).
struct DocumentRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  friend bool operator==(const DocumentRange& a, const DocumentRange& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

// The documents of each split of a dataset with `num_documents` documents (Megatron's
// convert_split_vector_to_split_matrix + _build_megatron_dataset_splits): with cumulative sums
// c0 = 0, c1 = w0, c2 = c1 + w1, c3 = c2 + w2 of the normalised weights, split i is
// [round(c_i * N), round(c_{i+1} * N)), Python rounding (ties to even). A split of weight 0 is
// absent (nullopt); a present split may still be empty for a small N. The ranges tile [0, N).
std::array<std::optional<DocumentRange>, kNumSplits> SplitDocuments(
    const std::array<double, kNumSplits>& normalized_weights, int64_t num_documents);

// What the training run asks of the data (Megatron's get_train_valid_test_num_samples).
struct SampleBudget {
  int64_t train_iters = 0;    // optimizer steps; 0 when train_samples is given
  int64_t train_samples = 0;  // 0 when train_iters is given
  int64_t global_batch_size = 0;
  int64_t eval_interval = 0;  // 0 = never evaluate: no validation samples
  int64_t eval_iters = 0;
};
// {train, valid, test} samples: train_samples or train_iters * G;
// valid (train_iters / eval_interval + 1) * eval_iters * G; test eval_iters * G. With
// train_samples, train_iters = train_samples / G (Megatron's update_train_iters without ramp-up).
absl::StatusOr<std::array<int64_t, kNumSplits>> TrainValidTestNumSamples(
    const SampleBudget& budget);

// How a GPTDataset covers its requested samples (GPTDataset._get_num_epochs and the
// separate_final_epoch rule).
struct EpochPlan {
  int64_t tokens_per_epoch = 0;
  int64_t num_epochs = 0;  // the fewest whole epochs with num_samples * seq + 1 tokens
  // True when num_epochs > 1 and the last epoch supplies fewer than
  // int(0.80 * samples_per_epoch) of the requested samples.
  bool separate_final_epoch = false;
  // ((num_epochs - 1) * tokens_per_epoch - 1) / seq_length: the samples before the last epoch
  // (meaningful when separate_final_epoch).
  int64_t num_samples_sans_final_epoch = 0;
  // (num_epochs * tokens_per_epoch - 1) / seq_length: the samples the sample index holds (>= the
  // request).
  int64_t num_samples_total = 0;
};
absl::StatusOr<EpochPlan> PlanEpochs(int64_t tokens_per_epoch, int64_t seq_length,
                                     int64_t num_samples);

// GPT's document index (_build_document_index): the documents of `range` repeated num_epochs
// times and shuffled as one array, or, with separate_final_epoch, the first num_epochs - 1
// epochs shuffled together and then the last epoch shuffled on its own. Values are document
// numbers in the indexed dataset (int32, as Megatron's).
absl::StatusOr<std::vector<int32_t>> BuildDocumentIndex(DocumentRange range, int64_t num_epochs,
                                                        bool separate_final_epoch,
                                                        NumpyRandomState* rng);

// GPT's sample index (helpers.cpp build_sample_idx): plan.num_samples_total + 1 entries of
// (position in document_index, token offset in that document), flattened as [pos0, off0, pos1,
// off1, ...]. Sample i is the tokens from entry i up to and including entry i + 1's token, so it
// has seq_length + 1 tokens and shares its last token with sample i + 1. `lengths` holds the
// token count of every document of the dataset (indexed by document number).
absl::StatusOr<std::vector<int64_t>> BuildSampleIndex(absl::Span<const int32_t> lengths,
                                                      absl::Span<const int32_t> document_index,
                                                      int64_t seq_length, const EpochPlan& plan);

// GPT's shuffle index (_build_shuffle_index): [0, num_samples) shuffled, then, when
// total_size > num_samples, [num_samples, total_size) shuffled on its own.
std::vector<int64_t> BuildShuffleIndex(int64_t num_samples, int64_t total_size,
                                       NumpyRandomState* rng);

// Blending (helpers.cpp build_blending_indices): for sample i (i = 0 .. size-1) pick the dataset
// d with the largest weights[d] * max(i, 1) - count[d] (the first on ties), record it and its
// running count, and increment that count. `weights` are normalised.
struct BlendingIndices {
  std::vector<int16_t> dataset_index;         // dataset of each blended sample
  std::vector<int64_t> dataset_sample_index;  // its sample number within that dataset
  std::vector<int64_t> counts;                // samples taken from each dataset
};
BlendingIndices BuildBlendingIndices(absl::Span<const double> weights, int64_t size);

// Samples to request from each blended dataset for a blended size (Megatron's
// _get_size_per_split_per_dataset with its 0.5% margin): ceil(size * weight * 1.005).
std::vector<int64_t> BlendedDatasetSizes(absl::Span<const double> normalized_weights, int64_t size);

}  // namespace mt::data

#endif  // MT_WORKER_DATA_GPT_INDICES_H_
