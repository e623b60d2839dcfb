#include "worker/generate/cached_forward.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/linear.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <vector>

#include "worker/parallel/tensor_parallel.h"

namespace mt::generate {
namespace {

// softmax(q k^T / sqrt(d) + mask) v for queries at positions [past, past + n) over keys at
// [0, past + n): query i sees keys j <= past + i. q [b, h, n, d], k and v [b, h, past + n, d].
torch::Tensor CachedAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, model::AttentionBackend backend) {
  const int64_t n = q.size(2);
  const int64_t total = k.size(2);
  const int64_t past = total - n;
  if (past == 0) {
    // Prefill: the model's own causal attention (fused or math as configured).
    return model::CausalAttention(q, k, v, 0.0, /*training=*/false, backend);
  }
#if TORCH_VERSION_MAJOR >= 2
  if (n == 1 && backend != model::AttentionBackend::kMath) {
    // One new token sees every cached key: no mask.
    return at::scaled_dot_product_attention(q, k, v);
  }
#endif
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = torch::matmul(q.to(torch::kFloat), k.to(torch::kFloat).transpose(-2, -1));
  scores.mul_(scale);
  if (n > 1) {
    const auto opts = torch::TensorOptions().dtype(torch::kLong).device(q.device());
    const torch::Tensor rows = torch::arange(past, total, opts).unsqueeze(1);
    const torch::Tensor cols = torch::arange(0, total, opts).unsqueeze(0);
    scores.masked_fill_(cols.gt(rows), -std::numeric_limits<double>::infinity());
  }
  const torch::Tensor probs = torch::softmax(scores, -1).to(q.scalar_type());
  return torch::matmul(probs, v);
}

torch::Tensor LayerWithCache(model::TransformerLayerImpl& layer, int64_t index,
                             const torch::Tensor& x, KvCache& cache) {
  model::SelfAttentionImpl& attn = *layer.self_attention;
  const model::GptConfig& c = attn.config;
  const torch::Tensor qkv_out = attn.linear_qkv(layer.input_layernorm(x));
  const int64_t b = qkv_out.size(0);
  const int64_t n = qkv_out.size(1);
  // A tensor-parallel shard holds whole heads (heads / tp of them): linear_qkv's output is this
  // rank's columns, linear_proj all-reduces the partial sums over the TP group.
  const int64_t heads = c.num_attention_heads / attn.tp_size;
  const int64_t d = c.head_dim();
  // Per head [q_h, k_h, v_h] (gpt.h's fused QKV layout).
  std::vector<torch::Tensor> qkv = qkv_out.view({b, n, heads, 3 * d}).split(d, -1);
  const torch::Tensor q = qkv[0].transpose(1, 2);
  auto [k, v] = cache.Append(index, qkv[1].transpose(1, 2), qkv[2].transpose(1, 2));
  torch::Tensor context = CachedAttention(q, k, v, c.attention_backend);
  context = context.transpose(1, 2).reshape({b, n, heads * d});
  const torch::Tensor h = x + attn.linear_proj(context);
  return h + layer.mlp(layer.pre_mlp_layernorm(h));
}

}  // namespace

torch::Tensor ForwardWithCache(model::GptModel& gpt, const torch::Tensor& tokens, KvCache& cache) {
  const model::ModelShard& shard = gpt.shard();
  TORCH_CHECK(shard.pre_process && shard.post_process &&
                  gpt.decoder->layers.size() == static_cast<size_t>(gpt.config().num_layers),
              "decoding needs every layer of the model (no pipeline stage)");
  const bool tp = shard.tp_size > 1;
  TORCH_CHECK(!tp || (shard.group() != nullptr && !shard.sequence_parallel),
              "decoding over tensor parallelism needs the shard's TP group and no sequence "
              "parallelism");
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(0) == cache.batch(), "tokens [", cache.batch(),
              ", n] expected, got ", tokens.sizes());
  const int64_t past = cache.length();
  const int64_t n = tokens.size(1);
  const torch::Tensor positions = torch::arange(
      past, past + n, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  model::GptEmbeddingImpl& emb = *gpt.embedding;
  // Under TP each rank looks up its vocabulary rows (zeros elsewhere): the sum is the lookup.
  torch::Tensor x = emb.word_embeddings(tokens);
  if (tp) parallel::AllReduce(x, shard.group());
  x = x + emb.position_embeddings(positions).unsqueeze(0);
  for (size_t i = 0; i < gpt.decoder->layers.size(); ++i) {
    x = LayerWithCache(*gpt.decoder->layers[i], static_cast<int64_t>(i), x, cache);
  }
  cache.Advance(n);
  const torch::Tensor last = gpt.decoder->final_layernorm(x.select(1, n - 1));
  const torch::Tensor logits = torch::nn::functional::linear(last, gpt.output_weight());
  // Under TP: this rank's vocabulary columns, gathered in rank order into the padded vocabulary.
  return (tp ? parallel::AllGather(logits, 1, shard.group()) : logits).to(torch::kFloat);
}

torch::Tensor ReferenceLastLogits(model::GptModel& gpt, const torch::Tensor& tokens) {
  return gpt.forward(tokens).select(1, tokens.size(1) - 1).to(torch::kFloat);
}

}  // namespace mt::generate
