#include "worker/data/gpt_dataset.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/paths.h"
#include "common/base/status_macros.h"
#include "worker/data/index_cache.h"

namespace mt::data {
namespace {

// Bumped whenever the index math or the description changes meaning.
constexpr int kIndexFormat = 1;

// Reads a cache file written for `description`, or builds the arrays with `build` and writes
// them, under a lock on the cache file so that processes sharing the directory build it once.
// `load` fills the caller's arrays from a file; `arrays` lists them for writing.
template <typename LoadFn, typename BuildFn, typename ArraysFn>
absl::StatusOr<CacheOutcome> LoadOrBuild(bool use_cache, const std::string& path,
                                         const std::string& description, LoadFn load, BuildFn build,
                                         ArraysFn arrays) {
  if (!use_cache) {
    MT_RETURN_IF_ERROR(build());
    return CacheOutcome::kDisabled;
  }
  const auto try_load = [&]() -> absl::Status {
    MT_ASSIGN_OR_RETURN(IndexCacheFile file, IndexCacheFile::Read(path, description));
    return load(file);
  };
  absl::Status loaded = try_load();
  if (loaded.ok()) return CacheOutcome::kLoaded;

  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  std::optional<CacheLock> lock;
  absl::Status writable = MakeDirectories(dir);
  if (writable.ok()) {
    absl::StatusOr<CacheLock> l = CacheLock::Acquire(path);
    if (l.ok()) {
      lock.emplace(std::move(*l));
      // Another process may have built it while this one waited for the lock.
      loaded = try_load();
      if (loaded.ok()) return CacheOutcome::kLoaded;
    } else {
      writable = l.status();
    }
  }
  if (!absl::IsNotFound(loaded)) {
    MT_LOG(WARNING) << "rebuilding sample indices: " << loaded.message();
  }
  MT_RETURN_IF_ERROR(build());
  if (writable.ok()) writable = WriteIndexCache(path, description, arrays());
  if (!writable.ok()) {
    MT_LOG(WARNING) << "sample indices not cached (they are rebuilt on every start): "
                    << writable.message();
    return CacheOutcome::kBuiltNotSaved;
  }
  return CacheOutcome::kBuiltAndSaved;
}

absl::Status CheckSeqLength(int64_t seq_length) {
  if (seq_length < 2 || seq_length > std::numeric_limits<int32_t>::max() - kExtraTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence length must be in [2, 2^31 - 2], got ", seq_length));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> SampleDataset::Sample(int64_t index) const {
  std::vector<int32_t> out(static_cast<size_t>(sample_length()));
  MT_RETURN_IF_ERROR(Read(index, out.data()));
  return out;
}

absl::string_view CacheOutcomeName(CacheOutcome outcome) {
  switch (outcome) {
    case CacheOutcome::kDisabled:
      return "disabled";
    case CacheOutcome::kLoaded:
      return "loaded";
    case CacheOutcome::kBuiltAndSaved:
      return "built and saved";
    case CacheOutcome::kBuiltNotSaved:
      return "built, not saved";
  }
  return "unknown";
}

std::string DefaultCacheDir(absl::string_view prefix) {
  const size_t slash = prefix.rfind('/');
  if (slash == absl::string_view::npos) return "cache";
  return absl::StrCat(prefix.substr(0, slash + 1), "cache");
}

// ---------------------------------------------------------------------------------------------
// GPTDataset

absl::StatusOr<std::unique_ptr<GPTDataset>> GPTDataset::Create(
    std::shared_ptr<const IndexedDataset> data, const GPTDatasetOptions& options) {
  if (data == nullptr) return absl::InvalidArgumentError("no indexed dataset");
  MT_RETURN_IF_ERROR(CheckSeqLength(options.seq_length));
  const DocumentRange& r = options.documents;
  if (r.begin < 0 || r.end < r.begin || r.end > data->num_sequences()) {
    return absl::InvalidArgumentError(absl::StrCat("documents [", r.begin, ", ", r.end,
                                                   ") are not inside ", data->prefix(), " (",
                                                   data->num_sequences(), " documents)"));
  }
  if (options.num_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative sample count ", options.num_samples));
  }
  std::unique_ptr<GPTDataset> ds(new GPTDataset());
  ds->data_ = std::move(data);
  ds->options_ = options;
  MT_RETURN_IF_ERROR(Annotate(
      ds->Build(), absl::StrCat(ds->data_->prefix(), " (", SplitName(options.split), " split)")));
  return ds;
}

absl::Status GPTDataset::Build() {
  const DocumentRange r = options_.documents;
  // The indices depend on the lengths of the split's documents only (not on the tokens, nor on
  // where the files are), so that is what the description records.
  std::vector<int32_t> lengths = data_->SequenceLengths();
  int64_t tokens_per_epoch = 0;
  for (int64_t d = r.begin; d < r.end; ++d) tokens_per_epoch += lengths[d];
  const std::string lengths_sha = Sha256Hex(absl::string_view(
      reinterpret_cast<const char*>(lengths.data() + r.begin), r.size() * sizeof(int32_t)));
  description_ = absl::StrCat(
      "{\"class\":\"GPTDataset\",\"format\":", kIndexFormat, ",\"split\":\"",
      SplitName(options_.split), "\",\"documents\":[", r.begin, ",", r.end,
      "],\"document_lengths_sha256\":\"", lengths_sha, "\",\"tokens_per_epoch\":", tokens_per_epoch,
      ",\"num_samples\":", options_.num_samples, ",\"sequence_length\":", options_.seq_length,
      ",\"random_seed\":", options_.seed, ",\"add_extra_token_to_sequence\":", kExtraTokens,
      ",\"drop_last_partial_sequence\":true}");

  MT_ASSIGN_OR_RETURN(plan_,
                      PlanEpochs(tokens_per_epoch, options_.seq_length, options_.num_samples));
  if (options_.use_cache) {
    const std::string dir =
        options_.cache_dir.empty() ? DefaultCacheDir(data_->prefix()) : options_.cache_dir;
    cache_path_ = JoinPath(dir, absl::StrCat(Sha256Hex(description_), "-GPTDataset-",
                                             SplitName(options_.split), ".mtidx"));
  }
  const auto load = [&](const IndexCacheFile& f) -> absl::Status {
    if (f.num_arrays() != 3) return absl::DataLossError("expected 3 arrays");
    MT_ASSIGN_OR_RETURN(document_index_, f.Array<int32_t>(0));
    MT_ASSIGN_OR_RETURN(sample_index_, f.Array<int64_t>(1));
    MT_ASSIGN_OR_RETURN(shuffle_index_, f.Array<int64_t>(2));
    const uint64_t n = static_cast<uint64_t>(plan_.num_samples_total);
    if (document_index_.size() != static_cast<uint64_t>(plan_.num_epochs * r.size()) ||
        sample_index_.size() != 2 * (n + 1) || shuffle_index_.size() != n) {
      return absl::DataLossError(absl::StrCat(cache_path_, ": array sizes do not match"));
    }
    return absl::OkStatus();
  };
  const auto build = [&]() -> absl::Status {
    NumpyRandomState rng(options_.seed);
    MT_ASSIGN_OR_RETURN(document_index_,
                        BuildDocumentIndex(r, plan_.num_epochs, plan_.separate_final_epoch, &rng));
    MT_ASSIGN_OR_RETURN(sample_index_,
                        BuildSampleIndex(lengths, document_index_, options_.seq_length, plan_));
    shuffle_index_ = BuildShuffleIndex(
        plan_.separate_final_epoch ? plan_.num_samples_sans_final_epoch : plan_.num_samples_total,
        plan_.num_samples_total, &rng);
    return absl::OkStatus();
  };
  const auto arrays = [&]() {
    return std::vector<CacheArray>{CacheArray::Of(document_index_), CacheArray::Of(sample_index_),
                                   CacheArray::Of(shuffle_index_)};
  };
  MT_ASSIGN_OR_RETURN(cache_outcome_, LoadOrBuild(options_.use_cache, cache_path_, description_,
                                                  load, build, arrays));
  return absl::OkStatus();
}

absl::Status GPTDataset::Read(int64_t index, int32_t* out) const {
  if (index < 0 || index >= size()) {
    return absl::OutOfRangeError(absl::StrCat("sample ", index, " out of range [0, ", size(), ")"));
  }
  return ReadUnshuffled(shuffle_index_[index], out);
}

absl::Status GPTDataset::ReadUnshuffled(int64_t position, int32_t* out) const {
  if (position < 0 || position >= size()) {
    return absl::OutOfRangeError(
        absl::StrCat("sample ", position, " out of range [0, ", size(), ")"));
  }
  const int64_t begin_pos = sample_index_[2 * position];
  const int64_t begin_offset = sample_index_[2 * position + 1];
  const int64_t end_pos = sample_index_[2 * position + 2];
  const int64_t end_offset = sample_index_[2 * position + 3];
  const int64_t want = sample_length();
  int64_t done = 0;
  // The sample runs from (begin_pos, begin_offset) through (end_pos, end_offset) inclusive.
  for (int64_t pos = begin_pos; pos <= end_pos; ++pos) {
    const int64_t doc = document_index_[pos];
    const int64_t offset = pos == begin_pos ? begin_offset : 0;
    const int64_t stop = pos == end_pos ? end_offset + kExtraTokens : data_->sequence_length(doc);
    const int64_t n = stop - offset;
    if (n < 0 || done + n > want) break;
    if (n > 0) MT_RETURN_IF_ERROR(data_->Read(doc, offset, n, out + done));
    done += n;
  }
  if (done != want) {
    return absl::DataLossError(absl::StrCat("sample ", position, " of ", data_->prefix(), " has ",
                                            done, " tokens, expected ", want,
                                            "; the sample index does not match the data"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// BlendedDataset

namespace {

// One finite weight >= 0 per non-null dataset, not all 0; one sample length; size >= 0.
absl::Status ValidateBlend(const std::vector<std::shared_ptr<const SampleDataset>>& datasets,
                           absl::Span<const double> weights, int64_t size) {
  if (datasets.empty() || datasets.size() != weights.size()) {
    return absl::InvalidArgumentError(absl::StrCat("blending needs one weight per dataset (",
                                                   datasets.size(), " datasets, ", weights.size(),
                                                   " weights)"));
  }
  if (datasets.size() >= 32767) {
    return absl::InvalidArgumentError("at most 32766 datasets can be blended");
  }
  if (size < 0) return absl::InvalidArgumentError(absl::StrCat("negative size ", size));
  for (size_t i = 0; i < datasets.size(); ++i) {
    if (datasets[i] == nullptr) return absl::InvalidArgumentError("null dataset");
    if (!(weights[i] >= 0) || !std::isfinite(weights[i])) {
      return absl::InvalidArgumentError(absl::StrCat("weight ", weights[i], " of dataset ", i));
    }
    if (datasets[i]->sample_length() != datasets[0]->sample_length()) {
      return absl::InvalidArgumentError("blended datasets differ in sample length");
    }
  }
  if (!(NumpySum(weights) > 0)) return absl::InvalidArgumentError("the weights sum to 0");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<BlendedDataset>> BlendedDataset::Create(
    std::vector<std::shared_ptr<const SampleDataset>> datasets, absl::Span<const double> weights,
    int64_t size, const BlendedDatasetOptions& options) {
  MT_RETURN_IF_ERROR(ValidateBlend(datasets, weights, size));
  std::unique_ptr<BlendedDataset> ds(new BlendedDataset());
  ds->datasets_ = std::move(datasets);
  // As Megatron's BlendedDataset (its builder has normalised user weights once already).
  ds->weights_ = Normalize(weights);
  ds->sample_length_ = ds->datasets_[0]->sample_length();
  std::vector<std::string> children;
  std::vector<std::string> weight_text;
  for (size_t i = 0; i < ds->datasets_.size(); ++i) {
    children.push_back(ds->datasets_[i]->description());
    weight_text.push_back(absl::StrFormat("%.17g", ds->weights_[i]));
  }
  ds->description_ =
      absl::StrCat("{\"class\":\"BlendedDataset\",\"format\":", kIndexFormat, ",\"datasets\":[",
                   absl::StrJoin(children, ","), "],\"weights\":[", absl::StrJoin(weight_text, ","),
                   "],\"size\":", size, "}");

  const bool use_cache = options.use_cache && !options.cache_dir.empty();
  const std::string path =
      use_cache ? JoinPath(options.cache_dir,
                           absl::StrCat(Sha256Hex(ds->description_), "-BlendedDataset.mtidx"))
                : std::string();
  BlendedDataset* self = ds.get();
  const auto load = [&](const IndexCacheFile& f) -> absl::Status {
    if (f.num_arrays() != 2) return absl::DataLossError("expected 2 arrays");
    MT_ASSIGN_OR_RETURN(self->dataset_index_, f.Array<int16_t>(0));
    MT_ASSIGN_OR_RETURN(self->dataset_sample_index_, f.Array<int64_t>(1));
    if (self->dataset_index_.size() != static_cast<size_t>(size) ||
        self->dataset_sample_index_.size() != static_cast<size_t>(size)) {
      return absl::DataLossError(absl::StrCat(path, ": array sizes do not match"));
    }
    return absl::OkStatus();
  };
  const auto build = [&]() -> absl::Status {
    BlendingIndices b = BuildBlendingIndices(self->weights_, size);
    self->dataset_index_ = std::move(b.dataset_index);
    self->dataset_sample_index_ = std::move(b.dataset_sample_index);
    return absl::OkStatus();
  };
  const auto arrays = [&]() {
    return std::vector<CacheArray>{CacheArray::Of(self->dataset_index_),
                                   CacheArray::Of(self->dataset_sample_index_)};
  };
  MT_ASSIGN_OR_RETURN(ds->cache_outcome_,
                      LoadOrBuild(use_cache, path, ds->description_, load, build, arrays));

  MT_RETURN_IF_ERROR(ds->CheckDraws());
  return ds;
}

absl::Status BlendedDataset::CheckDraws() const {
  std::vector<int64_t> needed(datasets_.size(), 0);
  for (size_t i = 0; i < dataset_index_.size(); ++i) {
    const int16_t d = dataset_index_[i];
    if (d < 0 || static_cast<size_t>(d) >= needed.size()) {
      return absl::DataLossError(absl::StrCat("blending index names dataset ", d));
    }
    needed[d] = std::max(needed[d], dataset_sample_index_[i] + 1);
  }
  for (size_t d = 0; d < needed.size(); ++d) {
    if (needed[d] > datasets_[d]->size()) {
      return absl::FailedPreconditionError(absl::StrCat("the blend draws ", needed[d],
                                                        " samples from dataset ", d,
                                                        ", which has only ", datasets_[d]->size()));
    }
  }
  return absl::OkStatus();
}

absl::Status BlendedDataset::Read(int64_t index, int32_t* out) const {
  if (index < 0 || index >= size()) {
    return absl::OutOfRangeError(absl::StrCat("sample ", index, " out of range [0, ", size(), ")"));
  }
  return datasets_[dataset_index_[index]]->Read(dataset_sample_index_[index], out);
}

// ---------------------------------------------------------------------------------------------
// BuildGPTDatasets

namespace {

class Builder {
 public:
  explicit Builder(const GPTDataConfig& config) : config_(config) {}

  absl::StatusOr<std::shared_ptr<const IndexedDataset>> Open(const std::string& prefix) {
    auto it = opened_.find(prefix);
    if (it != opened_.end()) return it->second;
    MT_ASSIGN_OR_RETURN(std::unique_ptr<IndexedDataset> ds, IndexedDataset::Create(prefix));
    std::shared_ptr<const IndexedDataset> shared(std::move(ds));
    opened_.emplace(prefix, shared);
    return shared;
  }

  // The GPTDataset of `split` drawn from `range` of `prefix`.
  absl::StatusOr<std::shared_ptr<const SampleDataset>> Gpt(const std::string& prefix, Split split,
                                                           DocumentRange range,
                                                           int64_t num_samples) {
    MT_ASSIGN_OR_RETURN(std::shared_ptr<const IndexedDataset> data, Open(prefix));
    GPTDatasetOptions o;
    o.split = split;
    o.documents = range;
    o.num_samples = num_samples;
    o.seq_length = config_.seq_length;
    o.seed = config_.seed;
    o.use_cache = config_.use_cache;
    o.cache_dir = config_.cache_dir;
    MT_ASSIGN_OR_RETURN(std::unique_ptr<GPTDataset> ds, GPTDataset::Create(std::move(data), o));
    return std::shared_ptr<const SampleDataset>(std::move(ds));
  }

  // The documents of `split` in `prefix`: per --split, or all of them for a per-split path.
  absl::StatusOr<std::optional<DocumentRange>> Range(
      const std::string& prefix, const std::optional<std::array<double, kNumSplits>>& weights,
      Split split) {
    MT_ASSIGN_OR_RETURN(std::shared_ptr<const IndexedDataset> data, Open(prefix));
    if (!weights.has_value()) return DocumentRange{0, data->num_sequences()};
    return SplitDocuments(*weights, data->num_sequences())[static_cast<int>(split)];
  }

  // One split from `blend`; null when absent.
  absl::StatusOr<std::shared_ptr<const SampleDataset>> BuildSplit(
      const Blend& blend, const std::optional<std::array<double, kNumSplits>>& split_weights,
      Split split, int64_t num_samples) {
    const size_t k = blend.prefixes.size();
    if (k == 0) return absl::InvalidArgumentError("no dataset prefix");
    if (!blend.weights.empty() && blend.weights.size() != k) {
      return absl::InvalidArgumentError(
          absl::StrCat(k, " prefixes but ", blend.weights.size(), " weights"));
    }
    if (k == 1) {
      MT_ASSIGN_OR_RETURN(std::optional<DocumentRange> range,
                          Range(blend.prefixes[0], split_weights, split));
      if (!range.has_value()) return nullptr;
      return Gpt(blend.prefixes[0], split, *range, num_samples);
    }
    std::vector<std::shared_ptr<const SampleDataset>> parts;
    std::vector<double> weights;
    int64_t size = num_samples;
    if (!blend.weights.empty()) {
      for (double w : blend.weights) {
        if (!(w > 0) || !std::isfinite(w)) {
          return absl::InvalidArgumentError(absl::StrCat("blend weight ", w, " is not positive"));
        }
      }
      weights = Normalize(blend.weights);
      const std::vector<int64_t> sizes = BlendedDatasetSizes(weights, num_samples);
      for (size_t i = 0; i < k; ++i) {
        MT_ASSIGN_OR_RETURN(std::optional<DocumentRange> range,
                            Range(blend.prefixes[i], split_weights, split));
        if (!range.has_value()) return nullptr;
        MT_ASSIGN_OR_RETURN(auto ds, Gpt(blend.prefixes[i], split, *range, sizes[i]));
        parts.push_back(std::move(ds));
      }
    } else {
      // Megatron: one epoch of each, weighted by its size; at most all of them.
      int64_t total = 0;
      for (size_t i = 0; i < k; ++i) {
        MT_ASSIGN_OR_RETURN(std::optional<DocumentRange> range,
                            Range(blend.prefixes[i], split_weights, split));
        if (!range.has_value()) return nullptr;
        MT_ASSIGN_OR_RETURN(auto ds, Gpt(blend.prefixes[i], split, *range, /*num_samples=*/0));
        weights.push_back(static_cast<double>(ds->size()));
        total += ds->size();
        parts.push_back(std::move(ds));
      }
      size = std::min(num_samples, total);
    }
    BlendedDatasetOptions bo;
    bo.use_cache = config_.use_cache;
    bo.cache_dir =
        config_.cache_dir.empty() ? DefaultCacheDir(blend.prefixes[0]) : config_.cache_dir;
    MT_ASSIGN_OR_RETURN(std::unique_ptr<BlendedDataset> blended,
                        BlendedDataset::Create(std::move(parts), weights, size, bo));
    return std::shared_ptr<const SampleDataset>(std::move(blended));
  }

 private:
  const GPTDataConfig& config_;
  std::map<std::string, std::shared_ptr<const IndexedDataset>> opened_;
};

}  // namespace

absl::StatusOr<GPTDatasets> BuildGPTDatasets(const GPTDataConfig& config,
                                             const std::array<int64_t, kNumSplits>& num_samples) {
  MT_RETURN_IF_ERROR(CheckSeqLength(config.seq_length));
  const bool per_split = std::any_of(config.blend_per_split.begin(), config.blend_per_split.end(),
                                     [](const auto& b) { return b.has_value(); });
  if (per_split == !config.blend.prefixes.empty()) {
    return absl::InvalidArgumentError(
        "give either a blend divided by a split (--data-path, --split) or per-split blends "
        "(--train-data-path, --valid-data-path, --test-data-path)");
  }
  std::optional<std::array<double, kNumSplits>> split_weights;
  if (!per_split) {
    MT_ASSIGN_OR_RETURN(split_weights, ParseSplit(config.split));
  }
  Builder builder(config);
  GPTDatasets out;
  for (int i = 0; i < kNumSplits; ++i) {
    const Split split = static_cast<Split>(i);
    if (num_samples[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative sample count for ", SplitName(split)));
    }
    if (num_samples[i] == 0) continue;
    const Blend* blend =
        per_split ? (config.blend_per_split[i].has_value() ? &*config.blend_per_split[i] : nullptr)
                  : &config.blend;
    if (blend == nullptr) continue;
    MT_ASSIGN_OR_RETURN(std::shared_ptr<const SampleDataset> ds,
                        builder.BuildSplit(*blend, split_weights, split, num_samples[i]));
    (i == 0 ? out.train : (i == 1 ? out.valid : out.test)) = std::move(ds);
  }
  return out;
}

}  // namespace mt::data
