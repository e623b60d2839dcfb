// The key/value cache of incremental decoding: per layer one keys and one values tensor of
// [batch, heads, max_len, head_dim] (heads: the model's, or a tensor-parallel shard's own),
// allocated once (Create) for the whole generation, so that no decode step allocates cache memory;
// a step writes its new keys and values at positions [length, length + n) in place and reads [0,
// length + n). A static-shape decode step (decode_step.h) instead writes at a position held on the
// device (WriteAt) and reads the whole cache, masking what lies after that position, or on CUDA
// hands the layer's tensors (keys(), values()) to one kernel that writes and attends
// (kernels::DecodeAttention).
//
// Thread-compatible (one decoding thread).
#ifndef MT_WORKER_GENERATE_KV_CACHE_H_
#define MT_WORKER_GENERATE_KV_CACHE_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/gpt_config.h"

namespace mt::generate {

class KvCache {
 public:
  // Errors: batch or max_len < 1, max_len over the model's position embeddings (naming the
  // limit).
  static absl::StatusOr<KvCache> Create(const model::GptConfig& config, int64_t batch,
                                        int64_t max_len, const torch::TensorOptions& options);
  // The cache of a tensor-parallel shard: `heads` of the model's heads per layer (its local
  // heads, num_attention_heads / tp); also an error unless 1 <= heads <= the model's heads.
  static absl::StatusOr<KvCache> Create(const model::GptConfig& config, int64_t batch,
                                        int64_t max_len, const torch::TensorOptions& options,
                                        int64_t heads);

  // Writes k, v [batch, heads, n, head_dim] of `layer` at [length(), length() + n) and returns
  // the layer's keys and values of [0, length() + n) (views of the cache). The length itself
  // moves on with Advance(n), once every layer has run.
  std::pair<torch::Tensor, torch::Tensor> Append(int64_t layer, const torch::Tensor& k,
                                                 const torch::Tensor& v);
  // Writes k, v [batch, heads, 1, head_dim] of `layer` at the position held in `position` (one
  // int64 on the cache's device: no host value, so a CUDA graph can capture it) and returns the
  // layer's WHOLE keys and values [batch, heads, max_len, head_dim]. Does not move length().
  std::pair<torch::Tensor, torch::Tensor> WriteAt(int64_t layer, const torch::Tensor& position,
                                                  const torch::Tensor& k, const torch::Tensor& v);
  // The layer's whole keys / values [batch, heads, max_len, head_dim] (the cache's own storage:
  // a kernel that writes into them, as kernels::DecodeAttention does, writes the cache).
  const torch::Tensor& keys(int64_t layer) const { return keys_[static_cast<size_t>(layer)]; }
  const torch::Tensor& values(int64_t layer) const { return values_[static_cast<size_t>(layer)]; }
  void Advance(int64_t n) { length_ += n; }
  void Reset() { length_ = 0; }

  int64_t length() const { return length_; }
  int64_t max_len() const { return max_len_; }
  int64_t batch() const { return batch_; }
  // Bytes of the cache (keys and values of every layer).
  int64_t bytes() const;

 private:
  std::vector<torch::Tensor> keys_;
  std::vector<torch::Tensor> values_;
  int64_t batch_ = 0;
  int64_t max_len_ = 0;
  int64_t length_ = 0;
};

}  // namespace mt::generate

#endif  // MT_WORKER_GENERATE_KV_CACHE_H_
