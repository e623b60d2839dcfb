// Choosing the next token from the logits: greedy (temperature 0), or sampling from
// softmax(logits / temperature) restricted to the top-k tokens and then to the smallest set
// whose probability reaches top-p (nucleus), drawn with a CPU generator seeded by the caller
// (the same seed gives the same tokens on any device).
// Thread-compatible free functions.
#ifndef MT_WORKER_GENERATE_SAMPLING_H_
#define MT_WORKER_GENERATE_SAMPLING_H_

#include <cstdint>

#include "absl/status/status.h"

namespace at {
class Generator;
class Tensor;
}  // namespace at

namespace mt::generate {

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy (argmax); >= 0
  int64_t top_k = 0;         // 0 = no limit; >= 0
  double top_p = 1.0;        // in (0, 1]; 1 = no limit
  uint64_t seed = 0;         // of the generator the draws take
};

// INVALID_ARGUMENT naming the flag (--temperature, --top-k, --top-p) and its range.
absl::Status ValidateSampling(const SamplingOptions& options);

// logits [b, V] (fp32, any device; only the first `vocab_size` columns are tokens, the rest is
// Megatron's padding) -> next tokens [b] int64 on the logits' device.
at::Tensor NextTokens(const at::Tensor& logits, int64_t vocab_size, const SamplingOptions& options,
                      at::Generator& generator);

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_SAMPLING_H_
