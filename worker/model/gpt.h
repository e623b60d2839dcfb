// GPT-2 as Megatron-LM builds it (the GPTModel of megatron/core/models/gpt with the local
// layer spec), for ONE device; tensor/pipeline/data parallelism wrap it (DESIGN.md §8.8).
//
//   tokens [b, s] -> word embedding + learned position embedding -> dropout(hidden)
//   -> num_layers x pre-LayerNorm block:
//        x = x + dropout(linear_proj(attention(linear_qkv(LN(x)))))
//        x = x + dropout(linear_fc2(gelu_tanh(linear_fc1(LN(x)))))
//   -> final LayerNorm -> logits = x W^T, W = the word embedding (tied) or output_layer
//
// - The vocabulary is padded to Megatron's multiple (GptConfig::padded_vocab_size); the
//   padded rows take part in the softmax, as in Megatron.
// - Fused QKV: linear_qkv's output is laid out per head as [q_h, k_h, v_h] (Megatron-core's
//   layout, so a tensor-parallel split of the output dimension keeps whole heads).
// - Parameter names follow Megatron-core: embedding.word_embeddings.weight,
//   decoder.layers.N.self_attention.linear_qkv.weight, decoder.final_layernorm.bias,
//   output_layer.weight (untied only), ...
// - Activations are [b, s, h] (batch first).
// - Initialisation (InitializeWeights, run by Create): normal(0, init_method_std) for
//   embeddings and linear weights; linear_proj and linear_fc2 weights normal(0, std /
//   sqrt(2 * num_layers)); biases 0; LayerNorm weight 1, bias 0. Draws from the default
//   generator: seed it first (torch::manual_seed) for repeatable weights.
//
// Thread-compatible (a torch::nn::Module).
#ifndef MT_WORKER_MODEL_GPT_H_
#define MT_WORKER_MODEL_GPT_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/gpt_config.h"

namespace mt::model {

// True when this LibTorch has at::scaled_dot_product_attention (>= 2.0).
bool FusedAttentionAvailable();

// softmax(q k^T / sqrt(d) + causal mask) v with dropout on the probabilities when training.
// q, k, v: [b, heads, s, d] -> [b, heads, s, d]. kAuto picks kFused where available; kFused
// where it is not throws c10::Error (GptModel::Create rejects that configuration earlier).
torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, double dropout_p, bool training,
                              AttentionBackend backend);

class SelfAttentionImpl : public torch::nn::Module {
 public:
  explicit SelfAttentionImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // [b, s, h] -> [b, s, h]

  torch::nn::Linear linear_qkv{nullptr};
  torch::nn::Linear linear_proj{nullptr};
  GptConfig config;
};
TORCH_MODULE(SelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear linear_fc1{nullptr};
  torch::nn::Linear linear_fc2{nullptr};
};
TORCH_MODULE(Mlp);

class TransformerLayerImpl : public torch::nn::Module {
 public:
  explicit TransformerLayerImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::LayerNorm input_layernorm{nullptr};
  SelfAttention self_attention{nullptr};
  torch::nn::LayerNorm pre_mlp_layernorm{nullptr};
  Mlp mlp{nullptr};
  double hidden_dropout = 0.0;
};
TORCH_MODULE(TransformerLayer);

class GptEmbeddingImpl : public torch::nn::Module {
 public:
  explicit GptEmbeddingImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& tokens);  // [b, s] int64 -> [b, s, h]

  torch::nn::Embedding word_embeddings{nullptr};
  torch::nn::Embedding position_embeddings{nullptr};
  double hidden_dropout = 0.0;
};
TORCH_MODULE(GptEmbedding);

// The stack of layers and the final LayerNorm; owns activation recomputation.
class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm final_layernorm{nullptr};
  GptConfig config;

 private:
  torch::Tensor RunLayers(torch::Tensor x, int64_t begin, int64_t end);
};
TORCH_MODULE(TransformerBlock);

class GptModel : public torch::nn::Module {
 public:
  // Builds the model in fp32 on the CPU and initialises it (see the file comment). Move or
  // cast it with to() before creating an optimizer over it. Errors: an invalid config;
  // AttentionBackend::kFused on a LibTorch without it (kFailedPrecondition).
  static absl::StatusOr<std::shared_ptr<GptModel>> Create(const GptConfig& config);

  // tokens [b, s] int64 with s <= max positions -> logits [b, s, padded_vocab] in the
  // model's dtype.
  torch::Tensor forward(const torch::Tensor& tokens);
  // Mean next-token cross entropy over all b*s positions, in fp32 (fp64 for an fp64 model).
  torch::Tensor Loss(const torch::Tensor& tokens, const torch::Tensor& targets);
  // tokens_and_targets [b, s + 1]: the usual GPT sample (inputs = [:, :-1], labels = [:, 1:]).
  torch::Tensor LossOnSample(const torch::Tensor& tokens_and_targets);

  // Megatron's initialisation; see the file comment.
  void InitializeWeights();
  // The weight that produces the logits: the word embedding when tied.
  torch::Tensor output_weight() const;

  const GptConfig& config() const { return config_; }
  // Switch recomputation or the attention backend of an existing model (tests, tuning).
  void SetRecompute(RecomputeGranularity granularity, RecomputeMethod method, int64_t num_layers);
  void SetAttentionBackend(AttentionBackend backend);

  GptEmbedding embedding{nullptr};
  TransformerBlock decoder{nullptr};
  torch::nn::Linear output_layer{nullptr};  // null when tied

 private:
  explicit GptModel(const GptConfig& config);
  void PropagateConfig();

  GptConfig config_;
};

}  // namespace mt::model

#endif  // MT_WORKER_MODEL_GPT_H_
