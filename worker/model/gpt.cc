#include "worker/model/gpt.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/kernels/cross_entropy.h"
#include "worker/model/recompute.h"

#if TORCH_VERSION_MAJOR >= 2
#define MT_HAVE_FUSED_SDPA 1
#else
#define MT_HAVE_FUSED_SDPA 0
#endif

namespace mt::model {
namespace {

torch::Tensor Dropout(const torch::Tensor& x, double p, bool training) {
  if (!training || p <= 0.0) return x;
  return torch::dropout(x, p, /*train=*/true);
}

// Leaves of a module in registration order (what a recompute unit must route grads to).
std::vector<torch::Tensor> ParametersOf(const torch::nn::Module& m) { return m.parameters(); }

torch::Tensor MathCausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, double dropout_p, bool training) {
  const int64_t s = q.size(-2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1));
  // 16-bit inputs: softmax in fp32 (Megatron's attention_softmax_in_fp32).
  const bool low_precision =
      scores.scalar_type() == torch::kHalf || scores.scalar_type() == torch::kBFloat16;
  if (low_precision) scores = scores.to(torch::kFloat);
  scores.mul_(scale);
  const torch::Tensor future =
      torch::ones({s, s}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
  scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
  torch::Tensor probs = torch::softmax(scores, -1);
  if (low_precision) probs = probs.to(q.scalar_type());
  probs = Dropout(probs, dropout_p, training);
  return torch::matmul(probs, v);
}

}  // namespace

bool FusedAttentionAvailable() { return MT_HAVE_FUSED_SDPA != 0; }

torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, double dropout_p, bool training,
                              AttentionBackend backend) {
  if (backend == AttentionBackend::kAuto) {
    backend = FusedAttentionAvailable() ? AttentionBackend::kFused : AttentionBackend::kMath;
  }
  if (backend == AttentionBackend::kMath) {
    return MathCausalAttention(q, k, v, dropout_p, training);
  }
#if MT_HAVE_FUSED_SDPA
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, training ? dropout_p : 0.0,
                                          /*is_causal=*/true);
#else
  TORCH_CHECK(false, "fused attention needs LibTorch >= 2.0; this is ", TORCH_VERSION);
#endif
}

// ---------------------------------------------------------------------------------------------

SelfAttentionImpl::SelfAttentionImpl(const GptConfig& c) : config(c) {
  const int64_t proj = c.num_attention_heads * c.head_dim();
  linear_qkv = register_module("linear_qkv", torch::nn::Linear(c.hidden_size, 3 * proj));
  linear_proj = register_module("linear_proj", torch::nn::Linear(proj, c.hidden_size));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t b = x.size(0);
  const int64_t s = x.size(1);
  const int64_t heads = config.num_attention_heads;
  const int64_t d = config.head_dim();
  // [b, s, heads, 3d] -> q, k, v [b, heads, s, d]
  std::vector<torch::Tensor> qkv = linear_qkv(x).view({b, s, heads, 3 * d}).split(d, -1);
  torch::Tensor q = qkv[0].transpose(1, 2);
  torch::Tensor k = qkv[1].transpose(1, 2);
  torch::Tensor v = qkv[2].transpose(1, 2);

  const double p = config.attention_dropout;
  const bool training = is_training();
  const AttentionBackend backend = config.attention_backend;
  torch::Tensor context;
  if (config.recompute_granularity == RecomputeGranularity::kSelective &&
      torch::GradMode::is_enabled()) {
    context = RecomputeInBackward(
        [p, training, backend](const std::vector<torch::Tensor>& in) {
          return CausalAttention(in[0], in[1], in[2], p, training, backend);
        },
        {q, k, v}, {}, /*preserve_rng=*/training && p > 0.0);
  } else {
    context = CausalAttention(q, k, v, p, training, backend);
  }
  // [b, heads, s, d] -> [b, s, heads * d]
  context = context.transpose(1, 2).reshape({b, s, heads * d});
  return linear_proj(context);
}

MlpImpl::MlpImpl(const GptConfig& c) {
  linear_fc1 = register_module("linear_fc1", torch::nn::Linear(c.hidden_size, c.ffn_size()));
  linear_fc2 = register_module("linear_fc2", torch::nn::Linear(c.ffn_size(), c.hidden_size));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return linear_fc2(torch::gelu(linear_fc1(x), "tanh"));
}

TransformerLayerImpl::TransformerLayerImpl(const GptConfig& c) : hidden_dropout(c.hidden_dropout) {
  auto ln = [&c] {
    return torch::nn::LayerNorm(
        torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layernorm_epsilon));
  };
  input_layernorm = register_module("input_layernorm", ln());
  self_attention = register_module("self_attention", SelfAttention(c));
  pre_mlp_layernorm = register_module("pre_mlp_layernorm", ln());
  mlp = register_module("mlp", Mlp(c));
}

torch::Tensor TransformerLayerImpl::forward(const torch::Tensor& input) {
  const bool training = is_training();
  torch::Tensor x =
      input + Dropout(self_attention(input_layernorm(input)), hidden_dropout, training);
  return x + Dropout(mlp(pre_mlp_layernorm(x)), hidden_dropout, training);
}

GptEmbeddingImpl::GptEmbeddingImpl(const GptConfig& c) : hidden_dropout(c.hidden_dropout) {
  word_embeddings = register_module("word_embeddings",
                                    torch::nn::Embedding(c.padded_vocab_size(), c.hidden_size));
  position_embeddings = register_module("position_embeddings",
                                        torch::nn::Embedding(c.max_positions(), c.hidden_size));
}

torch::Tensor GptEmbeddingImpl::forward(const torch::Tensor& tokens) {
  const int64_t s = tokens.size(1);
  TORCH_CHECK(s <= position_embeddings->weight.size(0), "sequence of ", s,
              " tokens is longer than the ", position_embeddings->weight.size(0),
              " position embeddings");
  const torch::Tensor positions =
      torch::arange(s, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  torch::Tensor x = word_embeddings(tokens) + position_embeddings(positions).unsqueeze(0);
  return Dropout(x, hidden_dropout, is_training());
}

TransformerBlockImpl::TransformerBlockImpl(const GptConfig& c) : config(c) {
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) layers->push_back(TransformerLayer(c));
  final_layernorm = register_module(
      "final_layernorm",
      torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layernorm_epsilon)));
}

torch::Tensor TransformerBlockImpl::RunLayers(torch::Tensor x, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) x = layers[i]->as<TransformerLayer>()->forward(x);
  return x;
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& input) {
  const int64_t n = config.num_layers;
  torch::Tensor x = input;
  if (config.recompute_granularity != RecomputeGranularity::kFull ||
      !torch::GradMode::is_enabled()) {
    x = RunLayers(x, 0, n);
    return final_layernorm(x);
  }
  const bool preserve_rng =
      is_training() && (config.hidden_dropout > 0.0 || config.attention_dropout > 0.0);
  auto recompute = [&](int64_t begin, int64_t end) {
    std::vector<torch::Tensor> params;
    for (int64_t i = begin; i < end; ++i) {
      for (const torch::Tensor& p : ParametersOf(*layers[i])) params.push_back(p);
    }
    x = RecomputeInBackward(
        [this, begin, end](const std::vector<torch::Tensor>& in) {
          return RunLayers(in[0], begin, end);
        },
        {x}, params, preserve_rng);
  };
  const int64_t k = config.recompute_num_layers;
  if (config.recompute_method == RecomputeMethod::kUniform) {
    // Megatron's uniform method: groups of k layers, each rerun as a unit.
    for (int64_t begin = 0; begin < n; begin += k) recompute(begin, std::min(begin + k, n));
  } else {
    // Block method: the first k layers are rerun one by one, the others keep activations.
    for (int64_t i = 0; i < n; ++i) {
      if (i < k) {
        recompute(i, i + 1);
      } else {
        x = RunLayers(x, i, i + 1);
      }
    }
  }
  return final_layernorm(x);
}

// ---------------------------------------------------------------------------------------------

GptModel::GptModel(const GptConfig& config) : config_(config) {
  embedding = register_module("embedding", GptEmbedding(config_));
  decoder = register_module("decoder", TransformerBlock(config_));
  if (config_.untie_embeddings_and_output_weights) {
    output_layer = register_module(
        "output_layer",
        torch::nn::Linear(torch::nn::LinearOptions(config_.hidden_size, config_.padded_vocab_size())
                              .bias(false)));
  }
}

absl::StatusOr<std::shared_ptr<GptModel>> GptModel::Create(const GptConfig& config) {
  GptConfig c = config;
  c.Resolve();
  absl::Status s = c.Validate();
  if (!s.ok()) return s;
  if (c.attention_backend == AttentionBackend::kFused && !FusedAttentionAvailable()) {
    return absl::FailedPreconditionError(
        absl::StrCat("fused attention needs LibTorch >= 2.0; this is ", TORCH_VERSION));
  }
  try {
    std::shared_ptr<GptModel> model(new GptModel(c));
    model->InitializeWeights();
    return model;
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("building the GPT model: ", e.what_without_backtrace()));
  }
}

void GptModel::InitializeWeights() {
  torch::NoGradGuard no_grad;
  const double std = config_.init_method_std;
  const double scaled_std = std / std::sqrt(2.0 * static_cast<double>(config_.num_layers));
  embedding->word_embeddings->weight.normal_(0.0, std);
  embedding->position_embeddings->weight.normal_(0.0, std);
  auto init_linear = [](torch::nn::Linear& l, double s) {
    l->weight.normal_(0.0, s);
    if (l->bias.defined()) l->bias.zero_();
  };
  auto init_ln = [](torch::nn::LayerNorm& ln) {
    ln->weight.fill_(1.0);
    ln->bias.zero_();
  };
  for (const auto& m : *decoder->layers) {
    auto layer = m->as<TransformerLayer>();
    init_ln(layer->input_layernorm);
    init_linear(layer->self_attention->linear_qkv, std);
    init_linear(layer->self_attention->linear_proj, scaled_std);
    init_ln(layer->pre_mlp_layernorm);
    init_linear(layer->mlp->linear_fc1, std);
    init_linear(layer->mlp->linear_fc2, scaled_std);
  }
  init_ln(decoder->final_layernorm);
  if (output_layer) output_layer->weight.normal_(0.0, std);
}

torch::Tensor GptModel::output_weight() const {
  return output_layer ? output_layer->weight : embedding->word_embeddings->weight;
}

torch::Tensor GptModel::forward(const torch::Tensor& tokens) {
  torch::Tensor x = decoder(embedding(tokens));
  return torch::nn::functional::linear(x, output_weight());
}

torch::Tensor GptModel::Loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  torch::Tensor logits = forward(tokens);
  const int64_t vocab = logits.size(-1);
  // On CUDA one fused kernel (worker/kernels/cross_entropy.h) that reuses the logits' memory
  // for their gradient; elsewhere cross_entropy on the logits upcast to fp32 (fp64 stays).
  return kernels::FusedCrossEntropy(logits.view({-1, vocab}), targets.reshape({-1}));
}

torch::Tensor GptModel::LossOnSample(const torch::Tensor& tokens_and_targets) {
  const int64_t s = tokens_and_targets.size(1) - 1;
  return Loss(tokens_and_targets.narrow(1, 0, s), tokens_and_targets.narrow(1, 1, s));
}

void GptModel::PropagateConfig() {
  decoder->config = config_;
  for (const auto& m : *decoder->layers) {
    m->as<TransformerLayer>()->self_attention->config = config_;
  }
}

void GptModel::SetRecompute(RecomputeGranularity granularity, RecomputeMethod method,
                            int64_t num_layers) {
  config_.recompute_granularity = granularity;
  config_.recompute_method = method;
  config_.recompute_num_layers = num_layers;
  PropagateConfig();
}

void GptModel::SetAttentionBackend(AttentionBackend backend) {
  config_.attention_backend = backend;
  PropagateConfig();
}

}  // namespace mt::model
