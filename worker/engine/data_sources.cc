#include "worker/engine/data_sources.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/engine/resolved_spec.h"

// worker/data is linked when its target exists (a generator expression in CMakeLists.txt).
#if defined(MT_ENGINE_WITH_DATA) && MT_ENGINE_WITH_DATA
#include "worker/data/data_loader.h"
#include "worker/data/gpt_dataset.h"
#include "worker/data/spec_data.h"
#define MT_HAVE_DATASET_LOADER 1
#else
#define MT_HAVE_DATASET_LOADER 0
#endif

namespace mt::engine {
namespace {

constexpr int64_t kGpt2BpeVocabSize = 50257;
constexpr int64_t kMaxSyntheticTokens = int64_t{1} << 24;

#if MT_HAVE_DATASET_LOADER
// A DataLoader's micro-batches as TokenBatches (int32 ids widened to int64).
class DataLoaderSource : public BatchSource {
 public:
  explicit DataLoaderSource(std::unique_ptr<data::DataLoader> loader)
      : loader_(std::move(loader)) {}

  absl::StatusOr<TokenBatch> Next(int64_t num_samples) override {
    MT_ASSIGN_OR_RETURN(data::MicroBatch mb, loader_->Next());
    if (mb.batch_size != num_samples) {
      return absl::InternalError(absl::StrCat("data loader gave ", mb.batch_size,
                                              " samples, the trainer wants ", num_samples));
    }
    TokenBatch batch;
    batch.rows = mb.batch_size;
    batch.cols = mb.sample_length;
    batch.tokens.assign(mb.tokens.begin(), mb.tokens.end());
    return batch;
  }

 private:
  std::unique_ptr<data::DataLoader> loader_;
};

absl::StatusOr<std::unique_ptr<BatchSource>> LoaderOver(
    std::shared_ptr<const data::SampleDataset> dataset, const mt::v1::JobSpec& spec,
    int64_t consumed_samples, int num_workers, int dp_rank, int dp_size) {
  data::DataLoaderOptions o;
  o.data_parallel_rank = dp_rank;
  o.data_parallel_size = dp_size;
  o.micro_batch_size = spec.training().micro_batch_size();
  o.global_batch_size = spec.training().global_batch_size();
  o.consumed_samples = consumed_samples;
  o.num_workers = num_workers;
  MT_ASSIGN_OR_RETURN(std::unique_ptr<data::DataLoader> loader,
                      data::DataLoader::Create(std::move(dataset), o));
  return std::unique_ptr<BatchSource>(new DataLoaderSource(std::move(loader)));
}
#endif

}  // namespace

bool HaveDatasetLoader() { return MT_HAVE_DATASET_LOADER != 0; }

absl::StatusOr<DataSources> DataSourcesFromSpec(const mt::v1::JobSpec& spec,
                                                int64_t consumed_samples, int dp_rank,
                                                int dp_size) {
#if MT_HAVE_DATASET_LOADER
  MT_RETURN_IF_ERROR(RequireResolvedBatch(spec.training()));
  MT_ASSIGN_OR_RETURN(data::GPTDataSetup setup, data::GPTDataSetupFromSpec(spec));
  // The trainer evaluates on the validation split only; the test split is not built (so a
  // small corpus whose test share rounds to no document still trains).
  setup.num_samples[2] = 0;
  MT_ASSIGN_OR_RETURN(data::GPTDatasets datasets,
                      data::BuildGPTDatasets(setup.config, setup.num_samples));
  if (datasets.train == nullptr) {
    return absl::InvalidArgumentError("data: the spec gives no training data");
  }
  DataSources out;
  MT_ASSIGN_OR_RETURN(out.train, LoaderOver(datasets.train, spec, consumed_samples,
                                            setup.num_workers, dp_rank, dp_size));
  if (datasets.valid != nullptr) {
    MT_ASSIGN_OR_RETURN(out.valid, LoaderOver(datasets.valid, spec, 0, 0, dp_rank, dp_size));
  }
  return out;
#else
  (void)spec;
  (void)consumed_samples;
  (void)dp_rank;
  (void)dp_size;
  return absl::UnimplementedError(
      "this build has no GPT dataset loader (worker/data); use --synthetic-data");
#endif
}

#if MT_HAVE_DATASET_LOADER
namespace {

// The validation samples the training run of `spec` built, when `r` asks for the same dataset.
std::optional<int64_t> TrainingValidSamples(const EvalDataRequest& r) {
  if (r.training_spec == nullptr) return std::nullopt;
  absl::StatusOr<data::GPTDataSetup> setup = data::GPTDataSetupFromSpec(*r.training_spec);
  if (!setup.ok()) return std::nullopt;
  const data::GPTDataConfig& c = setup->config;
  const bool same = c.blend.prefixes.size() == 1 && c.blend.prefixes[0] == r.prefix &&
                    c.split == r.split && c.seq_length == r.seq_length && c.seed == r.seed &&
                    !c.blend_per_split[1].has_value();
  if (!same || setup->num_samples[1] <= 0) return std::nullopt;
  return setup->num_samples[1];
}

}  // namespace
#endif

absl::StatusOr<EvalData> EvaluationDataSource(const EvalDataRequest& r) {
#if MT_HAVE_DATASET_LOADER
  data::GPTDataConfig config;
  config.blend.prefixes = {r.prefix};
  config.split = r.split;
  config.seq_length = r.seq_length;
  config.seed = r.seed;
  EvalData out;
  // One sample asks for one epoch: the dataset then holds exactly the split's samples once.
  int64_t build = std::max<int64_t>(1, r.num_samples);
  if (std::optional<int64_t> training = TrainingValidSamples(r); training.has_value()) {
    build = std::max(build, *training);
    out.same_samples_as_training = true;
  }
  MT_ASSIGN_OR_RETURN(data::GPTDatasets datasets, data::BuildGPTDatasets(config, {0, build, 0}));
  if (datasets.valid == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--split \"", r.split, "\" leaves no validation documents in ", r.prefix));
  }
  data::DataLoaderOptions o;
  o.micro_batch_size = r.micro_batch_size;
  MT_ASSIGN_OR_RETURN(std::unique_ptr<data::DataLoader> loader,
                      data::DataLoader::Create(datasets.valid, o));
  out.micro_batches = loader->total_micro_batches();
  if (r.num_samples > 0) {
    out.micro_batches = std::min(out.micro_batches, r.num_samples / r.micro_batch_size);
  }
  out.source = std::make_unique<DataLoaderSource>(std::move(loader));
  return out;
#else
  (void)r;
  return absl::UnimplementedError("this build has no GPT dataset loader (worker/data)");
#endif
}

absl::StatusOr<TokenBatch> DataParallelSlice::Next(int64_t num_samples) {
  MT_ASSIGN_OR_RETURN(TokenBatch all, source_->Next(num_samples * dp_size_));
  TokenBatch out;
  out.rows = num_samples;
  out.cols = all.cols;
  const auto first = all.tokens.begin() + dp_rank_ * num_samples * all.cols;
  out.tokens.assign(first, first + num_samples * all.cols);
  return out;
}

absl::StatusOr<DataSources> SyntheticDataSources(const mt::v1::JobSpec& spec, int dp_rank,
                                                 int dp_size, int64_t consumed_samples) {
  const mt::v1::ModelSpec& m = spec.model();
  const int64_t vocab = m.vocab_size() > 0 ? m.vocab_size() : kGpt2BpeVocabSize;
  MT_RETURN_IF_ERROR(RequireResolvedBatch(spec.training()));
  const int64_t global = spec.training().global_batch_size();
  const int64_t count = std::min<int64_t>(kMaxSyntheticTokens, 8 * global * m.seq_length() + 1);
  const uint64_t seed = spec.training().has_seed() ? spec.training().seed() : spec::kDefaultSeed;
  DataSources out;
  MT_ASSIGN_OR_RETURN(auto train, TokenSequenceSource::Create(SyntheticTokens(count, vocab, seed),
                                                              m.seq_length(), consumed_samples));
  MT_ASSIGN_OR_RETURN(auto valid, TokenSequenceSource::Create(
                                      SyntheticTokens(count, vocab, seed + 1), m.seq_length()));
  if (dp_size > 1) {
    out.train = std::make_unique<DataParallelSlice>(std::move(train), dp_rank, dp_size);
    out.valid = std::make_unique<DataParallelSlice>(std::move(valid), dp_rank, dp_size);
  } else {
    out.train = std::move(train);
    out.valid = std::move(valid);
  }
  return out;
}

}  // namespace mt::engine
