#include "worker/engine/batch_source.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mt::engine {

absl::StatusOr<std::unique_ptr<TokenSequenceSource>> TokenSequenceSource::Create(
    std::vector<int64_t> tokens, int64_t seq_length, int64_t first_sample) {
  if (tokens.empty()) return absl::InvalidArgumentError("token sequence is empty");
  if (seq_length < 1) {
    return absl::InvalidArgumentError(absl::StrCat("seq_length ", seq_length, " must be >= 1"));
  }
  if (first_sample < 0) {
    return absl::InvalidArgumentError(absl::StrCat("first sample ", first_sample, " < 0"));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("token ", i, " is negative: ", tokens[i]));
    }
  }
  return std::unique_ptr<TokenSequenceSource>(
      new TokenSequenceSource(std::move(tokens), seq_length, first_sample));
}

absl::StatusOr<TokenBatch> TokenSequenceSource::Next(int64_t num_samples) {
  if (num_samples < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch of ", num_samples, " samples"));
  }
  const int64_t n = static_cast<int64_t>(tokens_.size());
  TokenBatch batch;
  batch.rows = num_samples;
  batch.cols = seq_length_ + 1;
  batch.tokens.resize(static_cast<size_t>(batch.rows * batch.cols));
  for (int64_t r = 0; r < batch.rows; ++r) {
    // (sample * seq) mod n without overflow for long runs.
    const int64_t start = ((next_sample_ + r) % n) * (seq_length_ % n) % n;
    for (int64_t c = 0; c < batch.cols; ++c) {
      batch.tokens[static_cast<size_t>(r * batch.cols + c)] = tokens_[(start + c) % n];
    }
  }
  next_sample_ += num_samples;
  return batch;
}

std::vector<int64_t> SyntheticTokens(int64_t count, int64_t vocab_size, uint64_t seed) {
  std::vector<int64_t> out;
  if (count <= 0 || vocab_size <= 0) return out;
  out.reserve(static_cast<size_t>(count));
  uint64_t state = seed;
  for (int64_t i = 0; i < count; ++i) {
    // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    out.push_back(static_cast<int64_t>(z % static_cast<uint64_t>(vocab_size)));
  }
  return out;
}

}  // namespace mt::engine
