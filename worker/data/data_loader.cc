#include "worker/data/data_loader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace mt::data {

absl::StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(
    std::shared_ptr<const SampleDataset> dataset, const DataLoaderOptions& o) {
  if (dataset == nullptr) return absl::InvalidArgumentError("no dataset");
  if (o.micro_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("micro batch size must be >= 1, got ", o.micro_batch_size));
  }
  if (o.data_parallel_size < 1 || o.data_parallel_rank < 0 ||
      o.data_parallel_rank >= o.data_parallel_size) {
    return absl::InvalidArgumentError(absl::StrCat("data-parallel rank ", o.data_parallel_rank,
                                                   " is not in [0, ", o.data_parallel_size, ")"));
  }
  const int64_t chunk = o.micro_batch_size * o.data_parallel_size;
  const int64_t global = o.global_batch_size == 0 ? chunk : o.global_batch_size;
  if (global < chunk || global % chunk != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global batch size ", global, " is not a multiple of micro batch size ", o.micro_batch_size,
        " * data-parallel size ", o.data_parallel_size, " = ", chunk));
  }
  if (o.consumed_samples < 0 || o.consumed_samples % chunk != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("consumed samples ", o.consumed_samples,
                     " is not a non-negative multiple of micro * dp = ", chunk));
  }
  if (o.consumed_samples > dataset->size()) {
    return absl::OutOfRangeError(absl::StrCat("consumed samples ", o.consumed_samples,
                                              " exceed the dataset's ", dataset->size()));
  }
  if (o.num_workers < 0 || o.num_workers > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers must be in [0, 64], got ", o.num_workers));
  }
  if (o.prefetch_micro_batches < 1) {
    return absl::InvalidArgumentError("prefetch_micro_batches must be >= 1");
  }
  std::unique_ptr<DataLoader> loader(new DataLoader(std::move(dataset), o));
  loader->micro_batches_per_step_ = global / chunk;
  for (int i = 0; i < o.num_workers; ++i) {
    loader->workers_.emplace_back([l = loader.get()] { l->WorkerLoop(); });
  }
  return loader;
}

DataLoader::DataLoader(std::shared_ptr<const SampleDataset> dataset,
                       const DataLoaderOptions& options)
    : dataset_(std::move(dataset)),
      options_(options),
      chunk_(options.micro_batch_size * options.data_parallel_size) {
  // Megatron's sampler drops a trailing chunk that is not full (drop_last=True).
  total_ = (dataset_->size() - options_.consumed_samples) / chunk_;
}

DataLoader::~DataLoader() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

int64_t DataLoader::consumed_samples() const {
  return options_.consumed_samples + next_to_return_ * chunk_;
}

std::vector<int64_t> DataLoader::SampleIndices(int64_t ordinal) const {
  std::vector<int64_t> out(static_cast<size_t>(options_.micro_batch_size));
  const int64_t first = options_.consumed_samples + ordinal * chunk_ +
                        options_.data_parallel_rank * options_.micro_batch_size;
  for (int64_t i = 0; i < options_.micro_batch_size; ++i) out[i] = first + i;
  return out;
}

absl::StatusOr<MicroBatch> DataLoader::Load(int64_t ordinal) const {
  MicroBatch mb;
  mb.batch_size = options_.micro_batch_size;
  mb.sample_length = dataset_->sample_length();
  mb.sample_indices = SampleIndices(ordinal);
  mb.consumed_samples = options_.consumed_samples + (ordinal + 1) * chunk_;
  mb.tokens.resize(static_cast<size_t>(mb.batch_size * mb.sample_length));
  for (int64_t i = 0; i < mb.batch_size; ++i) {
    MT_RETURN_IF_ERROR(
        dataset_->Read(mb.sample_indices[i], mb.tokens.data() + i * mb.sample_length));
  }
  return mb;
}

void DataLoader::WorkerLoop() {
  const int64_t depth = options_.prefetch_micro_batches;
  while (true) {
    int64_t ordinal;
    {
      absl::MutexLock lock(&mu_);
      const auto can_work = [this, depth]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || next_to_load_ >= total_ || next_to_load_ < returned_ + depth;
      };
      mu_.Await(absl::Condition(&can_work));
      if (stop_ || next_to_load_ >= total_) return;
      ordinal = next_to_load_++;
    }
    absl::StatusOr<MicroBatch> mb = Load(ordinal);
    absl::MutexLock lock(&mu_);
    ready_.emplace(ordinal, std::move(mb));
  }
}

absl::StatusOr<MicroBatch> DataLoader::Next() {
  if (next_to_return_ >= total_) {
    return absl::OutOfRangeError(absl::StrCat("no samples left: ", consumed_samples(), " of ",
                                              dataset_->size(), " consumed"));
  }
  const int64_t ordinal = next_to_return_;
  absl::StatusOr<MicroBatch> mb;
  if (workers_.empty()) {
    mb = Load(ordinal);
  } else {
    absl::MutexLock lock(&mu_);
    const auto is_ready = [this, ordinal]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ready_.count(ordinal) > 0;
    };
    mu_.Await(absl::Condition(&is_ready));
    auto it = ready_.find(ordinal);
    mb = std::move(it->second);
    ready_.erase(it);
    returned_ = ordinal + 1;
  }
  ++next_to_return_;
  return mb;
}

}  // namespace mt::data
