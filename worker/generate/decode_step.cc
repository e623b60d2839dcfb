#include "worker/generate/decode_step.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/linear.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <vector>

namespace mt::generate {
namespace {

// softmax(q k^T / sqrt(d)) v over the keys where `visible` [1, 1, 1, max_len] is true. q [b, h,
// 1, d], k and v [b, h, max_len, d]. The math form mirrors cached_forward.cc's (fp32 scores).
torch::Tensor MaskedAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& visible,
                              model::AttentionBackend backend) {
#if TORCH_VERSION_MAJOR >= 2
  if (backend != model::AttentionBackend::kMath) {
    return at::scaled_dot_product_attention(q, k, v, visible);
  }
#endif
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = torch::matmul(q.to(torch::kFloat), k.to(torch::kFloat).transpose(-2, -1));
  scores.mul_(scale);
  scores.masked_fill_(visible.logical_not(), -std::numeric_limits<double>::infinity());
  const torch::Tensor probs = torch::softmax(scores, -1).to(q.scalar_type());
  return torch::matmul(probs, v);
}

torch::Tensor LayerStep(model::TransformerLayerImpl& layer, int64_t index, const torch::Tensor& x,
                        const torch::Tensor& position, const torch::Tensor& visible,
                        KvCache& cache) {
  model::SelfAttentionImpl& attn = *layer.self_attention;
  const model::GptConfig& c = attn.config;
  const torch::Tensor qkv_out = attn.linear_qkv(layer.input_layernorm(x));
  const int64_t b = qkv_out.size(0);
  const int64_t heads = c.num_attention_heads;
  const int64_t d = c.head_dim();
  // Per head [q_h, k_h, v_h] (gpt.h's fused QKV layout).
  std::vector<torch::Tensor> qkv = qkv_out.view({b, 1, heads, 3 * d}).split(d, -1);
  auto [k, v] = cache.WriteAt(index, position, qkv[1].transpose(1, 2), qkv[2].transpose(1, 2));
  torch::Tensor context =
      MaskedAttention(qkv[0].transpose(1, 2), k, v, visible, c.attention_backend);
  context = context.transpose(1, 2).reshape({b, 1, heads * d});
  const torch::Tensor h = x + attn.linear_proj(context);
  return h + layer.mlp(layer.pre_mlp_layernorm(h));
}

}  // namespace

DecodeInputs DecodeInputs::For(const KvCache& cache, const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  DecodeInputs in;
  in.tokens = torch::zeros({cache.batch(), 1}, opts);
  in.position = torch::zeros({1}, opts);
  in.key_positions = torch::arange(cache.max_len(), opts);
  return in;
}

torch::Tensor StaticDecodeStep(model::GptModel& gpt, const DecodeInputs& in, KvCache& cache) {
  const model::ModelShard& shard = gpt.shard();
  TORCH_CHECK(shard.tp_size == 1 && shard.pre_process && shard.post_process &&
                  gpt.decoder->layers.size() == static_cast<size_t>(gpt.config().num_layers),
              "decoding needs the whole model on one device");
  TORCH_CHECK(in.tokens.dim() == 2 && in.tokens.size(0) == cache.batch() &&
                  in.tokens.size(1) == 1 && in.key_positions.numel() == cache.max_len(),
              "decode inputs [", cache.batch(), ", 1] over ", cache.max_len(),
              " positions expected, got ", in.tokens.sizes(), " over ", in.key_positions.numel());
  // Keys at or before the position are visible, one row for every query.
  const torch::Tensor visible = in.key_positions.le(in.position).view({1, 1, 1, -1});
  model::GptEmbeddingImpl& emb = *gpt.embedding;
  torch::Tensor x =
      emb.word_embeddings(in.tokens) + emb.position_embeddings(in.position).unsqueeze(0);
  for (size_t i = 0; i < gpt.decoder->layers.size(); ++i) {
    x = LayerStep(*gpt.decoder->layers[i], static_cast<int64_t>(i), x, in.position, visible, cache);
  }
  const torch::Tensor last = gpt.decoder->final_layernorm(x.select(1, 0));
  return torch::nn::functional::linear(last, gpt.output_weight()).to(torch::kFloat);
}

}  // namespace mt::generate
