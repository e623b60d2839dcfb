// One decode step at static shapes: the form of ForwardWithCache (cached_forward.h) with one
// new token per row that a CUDA graph can capture and replay (decode_graph.h). Its inputs are
// device tensors whose shapes depend only on (batch, max_len): the new tokens [b, 1], their
// position (one int64, = cache.length()) and the positions of the cache's keys [max_len]. No
// host synchronisation, no shape that changes with the position, no host tensor.
//
// Each layer writes the token's keys and values into the KV cache at that position and attends
// over the keys [0, position]; what runs depends on the device:
//   - CUDA, fp32 / bf16 / fp16, head_dim a multiple of 8 in [32, 256], any attention backend
//     but kMath: one kernel per layer (kernels::DecodeAttention) writes the cache and attends
//     over the live keys only, flash-decoding style (the keys split over blocks, read up to
//     the position held on the device).
//   - Everything else (the CPU, other dtypes or head dims, kMath as the explicit reference):
//     two index_copy_ into the cache (KvCache::WriteAt, no host value) and attention over the
//     WHOLE cache with the keys after the position masked off by an additive mask (made once
//     per step): SDPA, or matmul + fp32 softmax with kMath.
// Then the final LayerNorm and the logits.
//
// Mathematically ForwardWithCache with one token (the tests check greedy tokens and the logits
// at a tolerance), not bit for bit: the keys are summed in another order (over max_len keys
// with a mask on the second path), and each LayerNorm adds the residual stream in the same
// kernel (kernels::FusedAddLayerNorm; on an H100 LibTorch's LayerNorm of one row and the add
// took 0.30 of a 1.3B step's 1.97 ms, bench/RESULTS.md). On CUDA at batch 1 that add and
// LayerNorm run inside the linear layer after them (kernels::NormGemv: QKV, fc1 and the
// logits), so a layer is six kernels: QKV, attention (two), proj, fc1, fc2. Whole models on
// one device only.
// Thread-compatible.
#ifndef MT_WORKER_GENERATE_DECODE_STEP_H_
#define MT_WORKER_GENERATE_DECODE_STEP_H_

#include <torch/types.h>

#include <cstdint>

#include "worker/generate/decode_step_options.h"
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
torch::Tensor StaticDecodeStep(model::GptModel& gpt, const DecodeInputs& in, KvCache& cache,
                               const DecodeStepOptions& options = {});

// The same step's logits [b, padded_vocab] in the model's dtype, for a caller that needs no
// fp32 copy of them (greedy decoding's argmax, decode_graph.h).
torch::Tensor StaticDecodeLogits(model::GptModel& gpt, const DecodeInputs& in, KvCache& cache,
                                 const DecodeStepOptions& options = {});

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_DECODE_STEP_H_
