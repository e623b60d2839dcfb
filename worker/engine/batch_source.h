// Where the trainer's token batches come from. The trainer owns one BatchSource for training
// and optionally one for validation; the real one (Megatron's GPT dataset over .bin/.idx
// files, worker/data) plugs in here. No LibTorch in this header: a batch is plain int64s.
#ifndef MT_WORKER_ENGINE_BATCH_SOURCE_H_
#define MT_WORKER_ENGINE_BATCH_SOURCE_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace mt::engine {

// `rows` samples of `cols` = seq_length + 1 tokens, row-major: inputs are [:, :-1], labels
// [:, 1:].
struct TokenBatch {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<int64_t> tokens;
};

// Thread-compatible; the trainer calls it from its own thread only.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The next `num_samples` samples. Errors end the training run with that status.
  virtual absl::StatusOr<TokenBatch> Next(int64_t num_samples) = 0;
};

// A simple, deterministic, in-memory source: cycles through a fixed token sequence. Sample i
// is the seq_length + 1 tokens starting at (first_sample + i) * seq_length, wrapping around
// the end of the sequence (consecutive samples overlap by one token, as Megatron's GPT samples
// do). A sequence of exactly global_batch * seq_length tokens gives the same batch every step.
// Thread-compatible.
class TokenSequenceSource : public BatchSource {
 public:
  // Errors: empty tokens, seq_length < 1, a negative token.
  static absl::StatusOr<std::unique_ptr<TokenSequenceSource>> Create(std::vector<int64_t> tokens,
                                                                     int64_t seq_length,
                                                                     int64_t first_sample = 0);

  absl::StatusOr<TokenBatch> Next(int64_t num_samples) override;
  int64_t next_sample() const { return next_sample_; }

 private:
  TokenSequenceSource(std::vector<int64_t> tokens, int64_t seq_length, int64_t first_sample)
      : tokens_(std::move(tokens)), seq_length_(seq_length), next_sample_(first_sample) {}

  std::vector<int64_t> tokens_;
  int64_t seq_length_;
  int64_t next_sample_;
};

// `count` tokens uniform in [0, vocab_size) from a fixed 64-bit generator (splitmix64) seeded
// with `seed`: the same on every machine and LibTorch version.
std::vector<int64_t> SyntheticTokens(int64_t count, int64_t vocab_size, uint64_t seed);

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_BATCH_SOURCE_H_
