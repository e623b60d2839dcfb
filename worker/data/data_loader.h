// Micro-batches for one data-parallel rank, in the order of Megatron-LM's
// MegatronPretrainingSampler (--dataloader-type single): starting at consumed_samples, the dataset
// is walked in chunks of micro_batch_size * dp_size consecutive samples, and DP rank r takes the
// slice [r * micro, (r + 1) * micro) of each chunk. A trailing partial chunk is dropped. So the
// DP ranks of one step together read samples [consumed, consumed + global_batch) exactly once,
// and resuming from a checkpoint's consumed-samples count reproduces the following batches.
//
//   DataLoaderOptions o;
//   o.micro_batch_size = 4; o.global_batch_size = 64;
//   o.data_parallel_rank = dp; o.data_parallel_size = dp_size;
//   o.consumed_samples = checkpoint.consumed_samples;
//   o.num_workers = 2;
//   MT_ASSIGN_OR_RETURN(auto loader, DataLoader::Create(datasets.train, o));
//   MT_ASSIGN_OR_RETURN(MicroBatch mb, loader->Next());  // mb.tokens: 4 x (seq + 1) int32
//
// Thread-safety: Next() and the accessors may be called from one thread at a time (the
// trainer's); with num_workers > 0, worker threads read ahead into a bounded reorder buffer and
// are stopped and joined by the destructor.
#ifndef MT_WORKER_DATA_DATA_LOADER_H_
#define MT_WORKER_DATA_DATA_LOADER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/data/gpt_dataset.h"

namespace mt::data {

struct DataLoaderOptions {
  int64_t micro_batch_size = 0;   // samples per rank per forward pass, >= 1
  int64_t global_batch_size = 0;  // samples per step over all DP ranks; 0 = micro * dp
  int64_t data_parallel_rank = 0;
  int64_t data_parallel_size = 1;
  // Samples consumed by all DP ranks before the first batch (a checkpoint's consumed samples);
  // a multiple of micro_batch_size * data_parallel_size.
  int64_t consumed_samples = 0;
  // Threads reading ahead; 0 reads on the caller's thread inside Next().
  int num_workers = 0;
  // Micro-batches read ahead at most (when num_workers > 0); >= 1.
  int prefetch_micro_batches = 4;
};

// One micro-batch of this rank: a row-major [batch_size, sample_length] matrix of token ids
// (sample_length = seq_length + 1: inputs are columns [0, seq), labels columns [1, seq]).
struct MicroBatch {
  int64_t batch_size = 0;
  int64_t sample_length = 0;
  std::vector<int32_t> tokens;
  std::vector<int64_t> sample_indices;  // the dataset index of each row
  // Samples consumed by all DP ranks once every rank has taken this micro-batch.
  int64_t consumed_samples = 0;
};

class DataLoader {
 public:
  static absl::StatusOr<std::unique_ptr<DataLoader>> Create(
      std::shared_ptr<const SampleDataset> dataset, const DataLoaderOptions& options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next micro-batch; OutOfRange once the dataset has no full chunk left. A read error is
  // returned in its batch's turn.
  absl::StatusOr<MicroBatch> Next();

  // Micro-batches per optimizer step: global / (micro * dp).
  int64_t micro_batches_per_step() const { return micro_batches_per_step_; }
  // Micro-batches this loader yields in all, and how many it has returned.
  int64_t total_micro_batches() const { return total_; }
  int64_t returned_micro_batches() const { return next_to_return_; }
  // Samples consumed by all DP ranks after the micro-batches returned so far.
  int64_t consumed_samples() const;

  // Dataset indices of this rank's micro-batch `ordinal` (0-based from the start position).
  std::vector<int64_t> SampleIndices(int64_t ordinal) const;

 private:
  DataLoader(std::shared_ptr<const SampleDataset> dataset, const DataLoaderOptions& options);
  absl::StatusOr<MicroBatch> Load(int64_t ordinal) const;
  void WorkerLoop();

  const std::shared_ptr<const SampleDataset> dataset_;
  const DataLoaderOptions options_;
  const int64_t chunk_;  // micro * dp
  int64_t micro_batches_per_step_ = 0;
  int64_t total_ = 0;
  int64_t next_to_return_ = 0;  // touched by the caller's thread only

  absl::Mutex mu_;
  int64_t next_to_load_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t returned_ ABSL_GUARDED_BY(mu_) = 0;  // mirrors next_to_return_ for the workers
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, absl::StatusOr<MicroBatch>> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
};

}  // namespace mt::data

#endif  // MT_WORKER_DATA_DATA_LOADER_H_
