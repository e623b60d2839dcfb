// The GPT forward for decoding: the model's own layers and weights (worker/model/gpt.h), run
// over new tokens only, with the keys and values of the earlier positions from a KvCache.
// Prefill is one call with the whole prompt; each decode step one call with one token per row.
// Mathematically the same as GptModel::forward on the whole sequence (the test checks greedy
// decoding token for token and the logits at a tolerance).
//
// Whole models on one device only (no tensor or pipeline sharding); no dropout (inference).
// Thread-compatible.
#ifndef MT_WORKER_GENERATE_CACHED_FORWARD_H_
#define MT_WORKER_GENERATE_CACHED_FORWARD_H_

#include <torch/types.h>

#include "worker/generate/kv_cache.h"
#include "worker/model/gpt.h"

namespace mt::generate {

// tokens [b, n] int64 at positions [cache.length(), cache.length() + n): appends their keys
// and values to `cache`, advances it by n, and returns the logits of the LAST position,
// [b, padded_vocab] in fp32. Call under torch::NoGradGuard (or InferenceMode). Throws
// c10::Error on misuse (a sharded model, a full cache).
torch::Tensor ForwardWithCache(model::GptModel& gpt, const torch::Tensor& tokens, KvCache& cache);

// The reference it must equal: the whole sequence through GptModel::forward, the last
// position's logits [b, padded_vocab] in fp32.
torch::Tensor ReferenceLastLogits(model::GptModel& gpt, const torch::Tensor& tokens);

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_CACHED_FORWARD_H_
