#include "worker/generate/decode_step.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/linear.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "worker/kernels/decode_attention.h"
#include "worker/kernels/gemv.h"
#include "worker/kernels/layer_norm.h"

namespace mt::generate {
namespace {

// softmax(q k^T / sqrt(d) + mask) v with `mask` [1, 1, 1, max_len] additive (0 where a key is
// visible, -inf after the position) in q's dtype: made once per step, so that no layer converts
// a boolean mask. q [b, h, 1, d], k and v [b, h, max_len, d]. The math form mirrors
// cached_forward.cc's (fp32 scores).
torch::Tensor MaskedAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& mask,
                              model::AttentionBackend backend) {
#if TORCH_VERSION_MAJOR >= 2
  if (backend != model::AttentionBackend::kMath) {
    return at::scaled_dot_product_attention(q, k, v, mask);
  }
#endif
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = torch::matmul(q.to(torch::kFloat), k.to(torch::kFloat).transpose(-2, -1));
  scores.mul_(scale).add_(mask.to(torch::kFloat));
  const torch::Tensor probs = torch::softmax(scores, -1).to(q.scalar_type());
  return torch::matmul(probs, v);
}

// The additive mask of MaskedAttention [1, 1, 1, max_len] in the step's dtype (0 for the keys
// at or before the position, -inf after it), made at the first layer that needs it: never when
// every layer runs the decode-attention kernel.
class StepMask {
 public:
  StepMask(const DecodeInputs& in, const torch::TensorOptions& options)
      : in_(in), options_(options) {}

  const torch::Tensor& Get() {
    if (!mask_.defined()) {
      mask_ = torch::zeros({1, 1, 1, in_.key_positions.numel()}, options_)
                  .masked_fill_(in_.key_positions.gt(in_.position).view({1, 1, 1, -1}),
                                -std::numeric_limits<double>::infinity());
    }
    return mask_;
  }

 private:
  const DecodeInputs& in_;
  torch::TensorOptions options_;
  torch::Tensor mask_;
};

torch::Tensor Norm(const torch::nn::LayerNorm& ln, const torch::Tensor& x) {
  return kernels::FusedLayerNorm(x, ln->weight, ln->bias, ln->options.eps());
}

// {x + residual, LayerNorm(x + residual)} ({x, LayerNorm(x)} without a residual): one kernel
// where it runs (worker/kernels).
std::pair<torch::Tensor, torch::Tensor> AddNorm(const torch::nn::LayerNorm& ln,
                                                const torch::Tensor& x,
                                                const torch::Tensor& residual) {
  if (!residual.defined()) return {x, Norm(ln, x)};
  return kernels::FusedAddLayerNorm(x, residual, ln->weight, ln->bias, ln->options.eps());
}

// {x + residual, act(LayerNorm(x + residual) w^T + b)} in one kernel (kernels::NormGemv) when
// the options allow it, the layer's weight is whole and not int8 and the kernel runs; else
// nullopt.
std::optional<std::pair<torch::Tensor, torch::Tensor>> NormLinear(
    const DecodeStepOptions& options, const torch::nn::LayerNorm& ln, const torch::Tensor& x,
    const torch::Tensor& residual, const torch::Tensor& weight, const torch::Tensor& bias,
    bool gelu) {
  if (!options.norm_in_linear || !weight.defined() ||
      !kernels::NormGemvAvailable(x, ln->weight, weight)) {
    return std::nullopt;
  }
  return kernels::NormGemv(x, residual, ln->weight, ln->bias, ln->options.eps(), weight, bias,
                           gelu);
}

// {x, the QKV projection of input_layernorm(x)} for the layer input x = h + mlp (h alone for an
// undefined mlp).
std::pair<torch::Tensor, torch::Tensor> NormQkv(const DecodeStepOptions& options,
                                                model::TransformerLayerImpl& layer,
                                                const torch::Tensor& h, const torch::Tensor& mlp) {
  model::ColumnParallelLinearImpl& qkv = *layer.self_attention->linear_qkv;
  if (!qkv.int8.q.defined()) {
    if (auto fused =
            NormLinear(options, layer.input_layernorm, h, mlp, qkv.weight, qkv.bias, false)) {
      return *std::move(fused);
    }
  }
  auto [x, ln_x] = AddNorm(layer.input_layernorm, h, mlp);
  return {x, qkv.forward(ln_x)};
}

// {h, the MLP's output for pre_mlp_layernorm(h)} for h = x + the attention's projection.
std::pair<torch::Tensor, torch::Tensor> NormMlp(const DecodeStepOptions& options,
                                                model::TransformerLayerImpl& layer,
                                                const torch::Tensor& x, const torch::Tensor& proj) {
  model::MlpImpl& mlp = *layer.mlp;
  model::ColumnParallelLinearImpl& fc1 = *mlp.linear_fc1;
  if (!fc1.int8.q.defined()) {
    if (auto fused =
            NormLinear(options, layer.pre_mlp_layernorm, x, proj, fc1.weight, fc1.bias, true)) {
      return {fused->first, mlp.linear_fc2(fused->second)};
    }
  }
  auto [h, ln_h] = AddNorm(layer.pre_mlp_layernorm, x, proj);
  return {h, mlp.forward(ln_h)};
}

// One layer given its input as two terms, h + mlp (undefined mlp: h alone), which
// its first LayerNorm adds. Returns its output as {h, mlp} in the same way.
std::pair<torch::Tensor, torch::Tensor> LayerStep(model::TransformerLayerImpl& layer, int64_t index,
                                                  const torch::Tensor& h_in,
                                                  const torch::Tensor& mlp_in,
                                                  const torch::Tensor& position, StepMask& mask,
                                                  KvCache& cache,
                                                  const DecodeStepOptions& options) {
  model::SelfAttentionImpl& attn = *layer.self_attention;
  const model::GptConfig& c = attn.config;
  auto [x, qkv_out] = NormQkv(options, layer, h_in, mlp_in);
  const int64_t b = qkv_out.size(0);
  const int64_t heads = c.num_attention_heads;
  const int64_t d = c.head_dim();
  // Per head [q_h, k_h, v_h] (gpt.h's fused QKV layout).
  std::vector<torch::Tensor> qkv = qkv_out.view({b, 1, heads, 3 * d}).split(d, -1);
  const torch::Tensor& keys = cache.keys(index);
  const torch::Tensor& values = cache.values(index);
  torch::Tensor context;
  // kMath stays the explicit reference; every other backend takes the kernel where it runs.
  if (c.attention_backend != model::AttentionBackend::kMath &&
      kernels::DecodeAttentionAvailable(qkv[0], qkv[1], qkv[2], position, keys, values)) {
    context = kernels::DecodeAttention(qkv[0], qkv[1], qkv[2], position, keys, values);
  } else {
    auto [k, v] = cache.WriteAt(index, position, qkv[1].transpose(1, 2), qkv[2].transpose(1, 2));
    context = MaskedAttention(qkv[0].transpose(1, 2), k, v, mask.Get(), c.attention_backend);
    context = context.transpose(1, 2).reshape({b, 1, heads * d});
  }
  return NormMlp(options, layer, x, attn.linear_proj(context));
}

// The embeddings as the two terms {word, position} that the first LayerNorm adds (at batch 1,
// where the terms have one shape: on CUDA the first QKV kernel adds them, kernels::NormGemv);
// at larger batches {their sum, undefined}.
std::pair<torch::Tensor, torch::Tensor> EmbedTokens(model::GptModel& gpt, const DecodeInputs& in) {
  model::GptEmbeddingImpl& emb = *gpt.embedding;
  torch::Tensor word = emb.word_embeddings(in.tokens);
  torch::Tensor position = emb.position_embeddings(in.position).unsqueeze(0);
  if (word.sizes() == position.sizes()) return {word, position};
  return {word + position, torch::Tensor()};
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

torch::Tensor StaticDecodeLogits(model::GptModel& gpt, const DecodeInputs& in, KvCache& cache,
                                 const DecodeStepOptions& options) {
  const model::ModelShard& shard = gpt.shard();
  TORCH_CHECK(shard.tp_size == 1 && shard.pre_process && shard.post_process &&
                  gpt.decoder->layers.size() == static_cast<size_t>(gpt.config().num_layers),
              "decoding needs the whole model on one device");
  TORCH_CHECK(in.tokens.dim() == 2 && in.tokens.size(0) == cache.batch() &&
                  in.tokens.size(1) == 1 && in.key_positions.numel() == cache.max_len(),
              "decode inputs [", cache.batch(), ", 1] over ", cache.max_len(),
              " positions expected, got ", in.tokens.sizes(), " over ", in.key_positions.numel());
  // The residual stream is carried as two terms {h, mlp} that the next LayerNorm adds (on CUDA
  // in the kernel of the linear layer after it, kernels::NormGemv).
  torch::Tensor h, mlp;
  std::tie(h, mlp) = EmbedTokens(gpt, in);
  StepMask mask(in, h.options());
  auto& layers = gpt.decoder->layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    std::tie(h, mlp) =
        LayerStep(*layers[i], static_cast<int64_t>(i), h, mlp, in.position, mask, cache, options);
  }
  const torch::nn::LayerNorm& final_ln = gpt.decoder->final_layernorm;
  const torch::Tensor out = gpt.output_weight();
  if (auto fused = NormLinear(options, final_ln, h, mlp, out, torch::Tensor(), false)) {
    return fused->second.select(1, 0);
  }
  const torch::Tensor ln = AddNorm(final_ln, h, mlp).second;
  return torch::nn::functional::linear(ln.select(1, 0), out);
}

torch::Tensor StaticDecodeStep(model::GptModel& gpt, const DecodeInputs& in, KvCache& cache,
                               const DecodeStepOptions& options) {
  return StaticDecodeLogits(gpt, in, cache, options).to(torch::kFloat);
}

}  // namespace mt::generate
