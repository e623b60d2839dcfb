// One decode step at static shapes: the form of ForwardWithCache (cached_forward.h) with one
// new token per row that a CUDA graph can capture and replay (decode_graph.h). Its inputs are
// device tensors whose shapes depend only on (batch, max_len): the new tokens [b, 1], their
// position (one int64, = cache.length()) and the positions of the cache's keys [max_len]. Each
// layer writes the token's keys and values into the KV cache at that position (index_copy_, no
// host value) and attends over the WHOLE cache with the keys after the position masked off;
// then the final LayerNorm and the logits. No host synchronisation, no shape that changes with
// the position, no host tensor.
//
// Mathematically ForwardWithCache with one token (the test checks greedy tokens and the logits
// at a tolerance), not bit for bit: the attention runs over max_len keys with an additive mask
// (made once per step) instead of length + 1 keys, and each LayerNorm adds the residual stream
// in the same kernel (kernels::FusedAddLayerNorm; on an H100 LibTorch's LayerNorm of one row
// and the add took 0.30 of a 1.3B step's 1.97 ms, bench/RESULTS.md). Whole models on one device
// only. Thread-compatible.
#ifndef MT_WORKER_GENERATE_DECODE_STEP_H_
#define MT_WORKER_GENERATE_DECODE_STEP_H_

#include <torch/types.h>

#include <cstdint>

#include "worker/generate/kv_cache.h"
#include "worker/model/gpt.h"

namespace mt::generate {

// The step's input tensors, on the cache's device, made once per (batch, max_len).
struct DecodeInputs {
  torch::Tensor tokens;         // [batch, 1] int64: the new token of every row
  torch::Tensor position;       // [1] int64: their position, cache.length() at the step
  torch::Tensor key_positions;  // [max_len] int64: 0, 1, ..., max_len - 1 (constant)

  static DecodeInputs For(const KvCache& cache, const torch::Device& device);
};

// Writes the keys and values of `in.tokens` at `in.position` into `cache` and returns their
// logits [b, padded_vocab] in fp32. Does NOT advance the cache (the caller does, after it).
// Call under torch::NoGradGuard. Throws c10::Error on misuse (a sharded model, shapes that do
// not match the cache).
torch::Tensor StaticDecodeStep(model::GptModel& gpt, const DecodeInputs& in, KvCache& cache);

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_DECODE_STEP_H_
