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
//   sqrt(2 * num_layers)); biases 0; LayerNorm weight 1, bias 0. Every parameter is drawn
//   whole, in fp32 on the CPU, from its own generator seeded with (build seed, its global
//   name), then sliced to this rank's tensor-parallel part (sharding.h): a model of any
//   TP/PP layout starts from exactly the weights of the one-device model with the same seed.
//
// Parallelism (ModelShard; DESIGN.md §8.8: the same code runs on one device with the default
// shard):
// - Tensor parallelism, Megatron's layers: linear_qkv and linear_fc1 column-parallel (whole
//   heads per rank: heads / tp each), linear_proj and linear_fc2 row-parallel (their bias added
//   once, after the reduction), the word embedding and an untied output layer
//   vocabulary-parallel (rank r holds rows [r V/tp, (r+1) V/tp)), and a vocabulary-parallel
//   cross entropy: no rank ever holds the full logits. The communication is
//   worker/parallel/tensor_parallel.h's mappings over the TP group. forward() returns this
//   rank's vocabulary shard of the logits; Loss() and ForwardStage() the full mean loss on
//   every TP rank.
// - Sequence parallelism (with tp > 1): the LayerNorm / dropout / residual regions hold
//   [b, s/tp, h] (rank r the r-th chunk of the sequence); all-gather along the sequence in
//   place of the identity before a column-parallel layer, reduce-scatter in place of the
//   all-reduce after a row-parallel one. The replicated parameters then get only this rank's
//   part of their gradient: SequenceParallelGradients() lists them, to be all-reduced over
//   the TP group before the optimizer (Megatron's allreduce_layernorm_grads).
// - Pipeline stages: `layers` (GLOBAL indices, consecutive), `pre_process` (the embedding)
//   and `post_process` (final LayerNorm, output layer, loss). Parameter names keep global
//   layer indices (decoder.layers.N.*, N in the whole model) whatever the stage.
// - Tied embeddings on a last stage that is not the first: the stage holds its own copy of
//   the word embedding, registered as "output_layer.weight" (Megatron-core's name) and
//   initialised to exactly the word embedding's values; shared_output_weight() returns it.
//   Its gradient must be summed with the first stage's embedding.word_embeddings.weight
//   gradient over the embedding group before each optimizer step (Megatron's
//   _allreduce_word_embedding_grads); a global gradient norm counts it once (skip it: the
//   first stage holds the same parameter).
// - Dropout under tensor parallelism: where the activation is replicated over the TP group
//   (hidden dropout without SP) every TP rank draws the same mask from the default
//   generator; where it is sharded (attention probabilities; hidden/embedding dropout under
//   SP) each rank draws its own mask from a seed derived from the default generator's state
//   and its TP rank (parallel::WithTensorParallelRng, Megatron's model-parallel RNG),
//   consuming the same amount of the default generator on every rank. With dropout, a TP run
//   therefore differs from the TP=1 run (as in Megatron); without dropout it is the same
//   computation.
//
// Thread-compatible (a torch::nn::Module).
#ifndef MT_WORKER_MODEL_GPT_H_
#define MT_WORKER_MODEL_GPT_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/kernels/fused_mlp.h"
#include "worker/kernels/int8_linear.h"
#include "worker/model/gpt_config.h"

namespace mt::parallel {
struct GroupHandle;  // worker/parallel/process_groups.h
}  // namespace mt::parallel

namespace mt::model {

// Which part of the model a rank builds: its tensor-parallel shard and its pipeline stage.
// The default is the whole model on one device.
struct ModelShard {
  // Tensor parallelism: group size and this rank's index in it. `tp_group` carries the
  // collectives; it may be null when tp_size > 1 only for a model that never runs forward
  // (e.g. building shards to compare or convert weights).
  int tp_size = 1;
  int tp_rank = 0;
  std::shared_ptr<const parallel::GroupHandle> tp_group;
  bool sequence_parallel = false;  // needs tp_size > 1 to mean anything
  // The sequence-parallel linears overlap their communication with their GEMMs
  // (parallel/tp_overlap.h); only with sequence_parallel.
  bool tp_comm_overlap = false;
  // Pipeline: GLOBAL indices of the layers this module holds, consecutive and ascending;
  // empty = all of them.
  std::vector<int64_t> layers;
  bool pre_process = true;   // holds the embedding; ForwardStage takes tokens
  bool post_process = true;  // holds final LayerNorm + output layer; ForwardStage returns loss

  const parallel::GroupHandle* group() const { return tp_group.get(); }
};

// How GptModel::Create builds and initialises.
struct ModelBuildOptions {
  // Seed of the initial weights; unset = drawn from the default CPU generator (seed it with
  // torch::manual_seed for repeatable weights).
  std::optional<uint64_t> seed;
  // Where the parameters live and in what dtype. Each parameter is drawn in fp32 on the CPU,
  // sliced to this rank's shard, then copied there: the model never exists as a whole fp32
  // CPU copy.
  torch::Device device = torch::Device(torch::kCPU);
  torch::ScalarType dtype = torch::kFloat;
};

// True when this LibTorch has at::scaled_dot_product_attention (>= 2.0).
bool FusedAttentionAvailable();

// softmax(q k^T / sqrt(d) + causal mask) v with dropout on the probabilities when training.
// q, k, v: [b, heads, s, d] -> [b, heads, s, d]. kAuto picks kFused where available; kFused
// where it is not throws c10::Error (GptModel::Create rejects that configuration earlier).
torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, double dropout_p, bool training,
                              AttentionBackend backend);

// Megatron's ColumnParallelLinear: weight [out / tp, in] (rows of the full weight), bias
// [out / tp]. Input: the full activation ([b, s/tp, h] all-gathered first under SP); output:
// this rank's columns. With tp = 1 it is torch::nn::Linear.
class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  ColumnParallelLinearImpl(int64_t in, int64_t out, bool bias, const ModelShard& shard,
                           const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;
  torch::Tensor bias;  // undefined without bias
  // Set by QuantizeInt8Linears (quantize.h) for inference: forward computes with it and
  // `weight` is empty.
  kernels::Int8Weight int8;

 private:
  const parallel::GroupHandle* group_;
  bool sequence_parallel_;
  bool tp_comm_overlap_;
  int tp_size_;
};
TORCH_MODULE(ColumnParallelLinear);

// Megatron's RowParallelLinear: weight [out, in / tp] (columns of the full weight), bias [out]
// replicated and added after the all-reduce (reduce-scatter under SP). Input: this rank's
// columns; output: the full activation ([b, s/tp, h] under SP).
class RowParallelLinearImpl : public torch::nn::Module {
 public:
  RowParallelLinearImpl(int64_t in, int64_t out, bool bias, const ModelShard& shard,
                        const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;
  torch::Tensor bias;
  kernels::Int8Weight int8;  // as ColumnParallelLinear's

 private:
  const parallel::GroupHandle* group_;
  bool sequence_parallel_;
  bool tp_comm_overlap_;
  int tp_size_;
};
TORCH_MODULE(RowParallelLinear);

// Megatron's VocabParallelEmbedding: weight [V / tp, h], rows [vocab_start, vocab_start +
// V/tp) of the table. Tokens outside the range look up zeros; the caller reduces the partial
// sums over the TP group (GptEmbedding does).
class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  VocabParallelEmbeddingImpl(int64_t vocab, int64_t hidden, const ModelShard& shard,
                             const torch::TensorOptions& options);
  // This rank's partial sum: [b, s] -> [b, s, h].
  torch::Tensor forward(const torch::Tensor& tokens);

  torch::Tensor weight;
  int64_t vocab_start = 0;
  int64_t vocab_end = 0;
  // The lookup's backward by kernels::EmbeddingBackward (GptConfig::fused_embedding).
  bool fused_backward = false;

 private:
  int tp_size_;
};
TORCH_MODULE(VocabParallelEmbedding);

class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(const GptConfig& config, const ModelShard& shard,
                    const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // [b, s, h] -> [b, s, h]
  // The same with the output projection's bias left out (tp = 1): {output without the bias,
  // the bias} (GptConfig::fold_linear_bias).
  std::pair<torch::Tensor, torch::Tensor> ForwardWithoutBias(const torch::Tensor& x);

  ColumnParallelLinear linear_qkv{nullptr};
  RowParallelLinear linear_proj{nullptr};
  GptConfig config;
  int tp_size = 1;
  int tp_rank = 0;

 private:
  // x [b, s, h] -> q, k, v [b, heads, s, d]: views of linear_qkv's output (kernels::QkvHeads
  // under GptConfig::fused_qkv where it runs).
  std::vector<torch::Tensor> ProjectQkv(const torch::Tensor& x, int64_t heads, int64_t d);
  // The attention's output before the projection: [b, s, heads/tp * d].
  torch::Tensor Context(const torch::Tensor& x);
};
TORCH_MODULE(SelfAttention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const GptConfig& config, const ModelShard& shard, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  // The same with fc2's bias left out (tp = 1): {output without the bias, the bias}
  // (GptConfig::fold_linear_bias).
  std::pair<torch::Tensor, torch::Tensor> ForwardWithoutBias(const torch::Tensor& x);

  ColumnParallelLinear linear_fc1{nullptr};
  RowParallelLinear linear_fc2{nullptr};

 private:
  bool whole_ = false;  // tp = 1: the layer's weights are whole (no collective around them)
  bool fused_ = false;  // GptConfig::fused_mlp with tp = 1: kernels::FusedMlp where it runs
  kernels::FusedMlpOptions fused_options_;  // GptConfig::mlp_gelu
};
TORCH_MODULE(Mlp);

// A layer's output with its last residual add left undone (GptConfig::fused_layernorm), for the
// next LayerNorm's kernel to make: x + delta, plus delta_bias on every row (fc2's bias under
// GptConfig::fold_linear_bias), delta (+ delta_bias) through dropout of delta_dropout first
// (GptConfig::fused_dropout_add). delta undefined: x alone; delta_bias undefined: no bias.
struct PendingSum {
  torch::Tensor x;
  torch::Tensor delta;
  torch::Tensor delta_bias;
  double delta_dropout = 0.0;
  // The sum itself, where no LayerNorm follows (a stage's end, no final LayerNorm).
  torch::Tensor Sum() const;
};

class TransformerLayerImpl : public torch::nn::Module {
 public:
  TransformerLayerImpl(const GptConfig& config, const ModelShard& shard,
                       const torch::TensorOptions& options);
  // [b, s, h] ([b, s/tp, h] under SP) -> the same shape.
  torch::Tensor forward(const torch::Tensor& x);
  // With fused_layernorm: the layer on `in`'s sum as its input, that sum made by the first
  // LayerNorm's kernel; returns the layer's output as a PendingSum (x, the MLP's delta and,
  // folded, fc2's bias), left for the next LayerNorm to make (TransformerBlock::RunLayersPending).
  PendingSum ForwardPending(const PendingSum& in);
  // Whether this forward leaves the output projection's and fc2's biases to the LayerNorms
  // (GptConfig::fold_linear_bias: configured, tp = 1, no hidden dropout or it fused, and
  // training mode).
  bool FoldsLinearBias() const;
  // The hidden dropout the LayerNorms' kernels apply (GptConfig::fused_dropout_add, training
  // mode); 0 where HiddenDropout applies it.
  double FusedDropout() const;
  // Dropout on the attention's or the MLP's output before its residual add (per-rank masks
  // under SP); the identity in eval mode.
  torch::Tensor HiddenDropout(const torch::Tensor& t);

  torch::nn::LayerNorm input_layernorm{nullptr};
  SelfAttention self_attention{nullptr};
  torch::nn::LayerNorm pre_mlp_layernorm{nullptr};
  Mlp mlp{nullptr};
  double hidden_dropout = 0.0;
  int tp_rank = 0;
  bool sharded_dropout = false;  // the activation is sharded over TP (SP): per-rank masks
  bool fused_layernorm = false;  // GptConfig::fused_layernorm
  // GptConfig::fold_linear_bias with fused_layernorm, tp = 1 and no hidden dropout (or
  // fused_dropout_add).
  bool fold_linear_bias = false;
  // GptConfig::fused_dropout_add with fused_layernorm, tp = 1 and hidden dropout.
  bool fused_dropout_add = false;
};
TORCH_MODULE(TransformerLayer);

class GptEmbeddingImpl : public torch::nn::Module {
 public:
  GptEmbeddingImpl(const GptConfig& config, const ModelShard& shard,
                   const torch::TensorOptions& options);
  // [b, s] int64 -> [b, s, h] ([b, s/tp, h] under SP: rank r's chunk of the sequence).
  torch::Tensor forward(const torch::Tensor& tokens);

  VocabParallelEmbedding word_embeddings{nullptr};
  VocabParallelEmbedding position_embeddings{nullptr};  // replicated: the whole table
  double hidden_dropout = 0.0;

 private:
  ModelShard shard_;
};
TORCH_MODULE(GptEmbedding);

// The stage's layers and (post_process) the final LayerNorm; owns activation recomputation.
class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(const GptConfig& config, const ModelShard& shard,
                       const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

  // Called with i just before layers[i] runs (again for a recomputed layer in backward) and
  // with layers.size() before the final LayerNorm; null = nothing. GptModel::SetForwardPreHook
  // sets it.
  std::function<void(int64_t index)> before_layer;
  // The stage's layers in order, registered as "layers.<global index>".
  std::vector<TransformerLayer> layers;
  std::vector<int64_t> layer_numbers;             // global index of layers[i]
  torch::nn::LayerNorm final_layernorm{nullptr};  // null unless post_process
  GptConfig config;

 private:
  torch::Tensor RunLayers(torch::Tensor x, int64_t begin, int64_t end);
  // The same, with the last layer's residual add left undone (fused_layernorm).
  PendingSum RunLayersPending(torch::Tensor x, int64_t begin, int64_t end);
};
TORCH_MODULE(TransformerBlock);

class GptModel : public torch::nn::Module {
 public:
  // Builds this rank's part of the model (`shard`; the whole model by default) and
  // initialises it (see the file comment) on options.device in options.dtype. Errors: an
  // invalid config or shard (heads, ffn size, padded vocabulary or, under SP, the sequence
  // not divisible by tp; layers outside the model; kInvalidArgument naming the field);
  // AttentionBackend::kFused on a LibTorch without it (kFailedPrecondition).
  static absl::StatusOr<std::shared_ptr<GptModel>> Create(const GptConfig& config,
                                                          const ModelShard& shard = {},
                                                          const ModelBuildOptions& options = {});

  // Whole model only (pre_process and post_process). tokens [b, s] int64 with s <= max
  // positions -> logits [b, s, padded_vocab / tp] (this rank's vocabulary shard) in the
  // model's dtype.
  torch::Tensor forward(const torch::Tensor& tokens);
  // Mean next-token cross entropy over all b*s positions, in fp32 (fp64 for an fp64 model).
  // Whole model only.
  torch::Tensor Loss(const torch::Tensor& tokens, const torch::Tensor& targets);
  // tokens_and_targets [b, s + 1]: the usual GPT sample (inputs = [:, :-1], labels = [:, 1:]).
  torch::Tensor LossOnSample(const torch::Tensor& tokens_and_targets);

  // One pipeline stage. `input`: tokens [b, s] int64 on a pre_process stage, otherwise the
  // previous stage's output [b, s, h] ([b, s/tp, h] under SP). Returns on a post_process
  // stage the mean loss over `targets` [b, s] (as Loss), otherwise this stage's output
  // hidden state to send to the next stage (same shape as a hidden input). `targets` is
  // read only on a post_process stage (may be undefined elsewhere).
  torch::Tensor ForwardStage(const torch::Tensor& input, const torch::Tensor& targets);

  // The parts a forward runs, in order: the embedding (pre_process), each layer of this
  // module, the final LayerNorm with the output layer (post_process).
  int64_t num_forward_parts() const;
  // The part of the forward that first uses the parameter `name` (a key of
  // named_parameters(): the tied word embedding is needed by the embedding); -1 for a name
  // this module does not hold.
  int64_t ForwardPartOf(const std::string& name) const;
  // `hook(part)` runs just before each part of every forward (forward, Loss, ForwardStage; a
  // recomputed layer calls it again during backward); null removes it. LibTorch C++ has no
  // module forward pre-hooks: this is the trainer's place to wait for a part's parameters
  // (the distributed optimizer's overlapped all-gather, bucket by bucket, as Megatron's
  // forward pre-hooks do). It may throw (a c10::Error) to fail the forward.
  void SetForwardPreHook(std::function<void(int64_t part)> hook);

  // Megatron's initialisation, from the build seed; see the file comment.
  void InitializeWeights();
  // The weight that produces the logits (this rank's vocabulary shard): the word embedding
  // when tied, output_layer's otherwise, the stage's copy on a tied last stage; undefined on
  // a stage without post_process.
  torch::Tensor output_weight() const;
  // The tied last stage's copy of the word embedding (registered as
  // kSharedOutputWeightName); undefined when the stage has none. See the file comment.
  torch::Tensor shared_output_weight() const;
  static constexpr const char* kSharedOutputWeightName = "output_layer.weight";

  // Parameters whose gradient each TP rank holds only in part under sequence parallelism
  // (LayerNorms, row-parallel biases, the position embedding: every replicated parameter),
  // to be summed over the TP group before the optimizer. Empty without SP or with tp = 1.
  std::vector<torch::Tensor> SequenceParallelGradients() const;
  std::vector<std::string> SequenceParallelParameterNames() const;

  const GptConfig& config() const { return config_; }
  const ModelShard& shard() const { return shard_; }
  // Switch recomputation or the attention backend of an existing model (tests, tuning).
  void SetRecompute(RecomputeGranularity granularity, RecomputeMethod method, int64_t num_layers);
  void SetAttentionBackend(AttentionBackend backend);

  GptEmbedding embedding{nullptr};             // null unless pre_process
  TransformerBlock decoder{nullptr};           // this stage's layers (+ final LayerNorm)
  ColumnParallelLinear output_layer{nullptr};  // untied post_process stages only

 private:
  GptModel(const GptConfig& config, const ModelShard& shard, const torch::TensorOptions& options);
  void PropagateConfig();
  torch::Tensor OutputLoss(const torch::Tensor& hidden, const torch::Tensor& targets);

  GptConfig config_;
  ModelShard shard_;
  uint64_t seed_ = 0;
  std::function<void(int64_t part)> pre_hook_;
};

}  // namespace mt::model

#endif  // MT_WORKER_MODEL_GPT_H_
