#include "worker/generate/kv_cache.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mt::generate {

absl::StatusOr<KvCache> KvCache::Create(const model::GptConfig& config, int64_t batch,
                                        int64_t max_len, const torch::TensorOptions& options) {
  return Create(config, batch, max_len, options, config.num_attention_heads);
}

absl::StatusOr<KvCache> KvCache::Create(const model::GptConfig& config, int64_t batch,
                                        int64_t max_len, const torch::TensorOptions& options,
                                        int64_t heads) {
  if (heads < 1 || heads > config.num_attention_heads) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache: ", heads, " heads outside [1, ",
                                                   config.num_attention_heads,
                                                   "] (the model's heads)"));
  }
  if (batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache: batch ", batch, " must be >= 1"));
  }
  if (max_len < 1 || max_len > config.max_positions()) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache: length ", max_len, " outside [1, ",
                                                   config.max_positions(),
                                                   "] (the model's position embeddings)"));
  }
  KvCache cache;
  cache.batch_ = batch;
  cache.max_len_ = max_len;
  const std::vector<int64_t> shape = {batch, heads, max_len, config.head_dim()};
  for (int64_t i = 0; i < config.num_layers; ++i) {
    cache.keys_.push_back(torch::zeros(shape, options));
    cache.values_.push_back(torch::zeros(shape, options));
  }
  return cache;
}

std::pair<torch::Tensor, torch::Tensor> KvCache::Append(int64_t layer, const torch::Tensor& k,
                                                        const torch::Tensor& v) {
  const int64_t n = k.size(2);
  TORCH_CHECK(length_ + n <= max_len_, "KV cache full: ", length_, " + ", n, " > ", max_len_);
  torch::Tensor& keys = keys_[static_cast<size_t>(layer)];
  torch::Tensor& values = values_[static_cast<size_t>(layer)];
  keys.narrow(2, length_, n).copy_(k);
  values.narrow(2, length_, n).copy_(v);
  return {keys.narrow(2, 0, length_ + n), values.narrow(2, 0, length_ + n)};
}

std::pair<torch::Tensor, torch::Tensor> KvCache::WriteAt(int64_t layer,
                                                         const torch::Tensor& position,
                                                         const torch::Tensor& k,
                                                         const torch::Tensor& v) {
  torch::Tensor& keys = keys_[static_cast<size_t>(layer)];
  torch::Tensor& values = values_[static_cast<size_t>(layer)];
  keys.index_copy_(2, position, k);
  values.index_copy_(2, position, v);
  return {keys, values};
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const torch::Tensor& t : keys_) total += t.numel() * t.element_size();
  for (const torch::Tensor& t : values_) total += t.numel() * t.element_size();
  return total;
}

}  // namespace mt::generate
