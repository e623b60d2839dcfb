// The GPT forward for decoding: the model's own layers and weights (worker/model/gpt.h), run
// over new tokens only, with the keys and values of the earlier positions from a KvCache.
// Prefill is one call with the whole prompt; each decode step one call with one token per row.
// Mathematically the same as GptModel::forward on the whole sequence (the test checks greedy
// decoding token for token and the logits at a tolerance).
//
// Every layer of the model (no pipeline stage); no dropout (inference). A tensor-parallel shard
// (gpt.h's ModelShard with its TP group, no sequence parallelism) decodes over its own heads
// with a KvCache of its local heads (num_attention_heads / tp): its ColumnParallel/RowParallel
// linears and the vocabulary-parallel embedding do their collectives, and the logits are
// gathered over the TP group, so every TP rank returns the same full logits. Every TP rank must
// call it with the same tokens (the collectives pair up). Thread-compatible.
#ifndef MT_WORKER_GENERATE_CACHED_FORWARD_H_
#define MT_WORKER_GENERATE_CACHED_FORWARD_H_

#include <torch/types.h>

#include "worker/generate/kv_cache.h"
#include "worker/model/gpt.h"

namespace mt::generate {

// tokens [b, n] int64 at positions [cache.length(), cache.length() + n): appends their keys
// and values to `cache`, advances it by n, and returns the logits of the LAST position,
// [b, padded_vocab] in fp32 (under TP: gathered from the ranks' vocabulary shards). Call under
// torch::NoGradGuard (or InferenceMode). Throws c10::Error on misuse (a pipeline stage, a TP
// shard without its group or with sequence parallelism, a full cache) and when a collective
// fails.
torch::Tensor ForwardWithCache(model::GptModel& gpt, const torch::Tensor& tokens, KvCache& cache);

// The reference it must equal: the whole sequence through GptModel::forward, the last
// position's logits [b, padded_vocab] in fp32.
torch::Tensor ReferenceLastLogits(model::GptModel& gpt, const torch::Tensor& tokens);

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_CACHED_FORWARD_H_
