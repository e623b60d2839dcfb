// The GPT model's configuration as a plain struct (no LibTorch), plus the pure arithmetic
// around it: Megatron's vocabulary padding, the exact parameter count and the MFU formula of
// DESIGN.md §9. Thread-safe (plain values and pure functions).
#ifndef MT_WORKER_MODEL_GPT_CONFIG_H_
#define MT_WORKER_MODEL_GPT_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "worker/kernels/mlp_gelu.h"

namespace mt::v1 {
class JobSpec;
}  // namespace mt::v1

namespace mt::model {

// How the attention core (softmax(QK^T / sqrt(d)) V with the causal mask) is computed.
enum class AttentionBackend {
  kAuto,   // kFused where LibTorch has it (>= 2.0), else kMath
  kMath,   // explicit matmul + masked softmax (fp32 softmax for 16-bit inputs); exact reference
  kFused,  // at::scaled_dot_product_attention(is_causal=true): flash / memory-efficient kernels
  kCudnn,  // kFused restricted to cuDNN's fused attention (CUDA, LibTorch >= 2.3)
  kFlash,  // kFused restricted to the flash-attention kernels (CUDA)
};

// Megatron's --recompute-granularity.
enum class RecomputeGranularity {
  kNone,
  kFull,       // whole transformer blocks are rerun in backward (see recompute_method)
  kSelective,  // only the attention core is rerun (it holds the s^2 activations)
};

// Megatron's --recompute-method (with kFull).
enum class RecomputeMethod {
  kUniform,  // blocks grouped by recompute_num_layers; every group is one recompute unit
  kBlock,    // the first recompute_num_layers blocks are recomputed one by one, the rest not
};

struct GptConfig {
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t ffn_hidden_size = 0;  // 0 = 4 * hidden_size
  int64_t kv_channels = 0;      // 0 = hidden_size / num_attention_heads
  int64_t seq_length = 0;
  int64_t max_position_embeddings = 0;  // 0 = seq_length
  int64_t vocab_size = 0;               // before padding
  int64_t make_vocab_size_divisible_by = 128;
  int64_t tensor_model_parallel_size = 1;  // only for the vocabulary padding rule
  double hidden_dropout = 0.1;
  double attention_dropout = 0.1;
  double init_method_std = 0.02;
  double layernorm_epsilon = 1e-5;
  bool untie_embeddings_and_output_weights = false;
  AttentionBackend attention_backend = AttentionBackend::kAuto;
  RecomputeGranularity recompute_granularity = RecomputeGranularity::kNone;
  RecomputeMethod recompute_method = RecomputeMethod::kUniform;
  int64_t recompute_num_layers = 1;
  // The output layer and its loss as one autograd node (kernels::FusedLinearCrossEntropy) on
  // CUDA: backward never passes over the [tokens, vocab] gradient again (+1.3-6.3% tok/s on an
  // H200, bench/RESULTS.md). Used with tp = 1 (no effect otherwise); CPU: the same math eagerly.
  bool fused_lm_head = true;
  // The MLP's bias + GELU in the fc1 GEMM's cuBLASLt epilogue and the GELU's derivative in the
  // epilogue of a backward GEMM (kernels::FusedMlp) on CUDA: 1.03-1.07x LibTorch's chain for the
  // MLP's forward + backward on an H200 (bench/engine/fused_mlp_bench). Used with tp = 1; CPU:
  // the same math eagerly.
  bool fused_mlp = true;
  // With fused_mlp, where training's forward applies fc1's bias and GELU: the GEMM's epilogue,
  // a GELU kernel after it, or (kAuto) the faster of the two for the shape, timed once a process
  // (kernels::MlpGelu).
  kernels::MlpGelu mlp_gelu = kernels::MlpGelu::kAuto;
  // LayerNorm through kernels::FusedLayerNorm on CUDA, the attention's residual add fused into
  // the second LayerNorm of each block (kernels::FusedAddLayerNorm): +4.8% tok/s at 124M, +4.7%
  // at 350M, +1.3% at 1.3B on an H200 (bench/RESULTS.md, 2026-12-03, issue #16); elsewhere the
  // same math through LibTorch.
  bool fused_layernorm = true;
  // The attention's QKV projection as one autograd node (kernels::QkvHeads) on CUDA: backward
  // gathers dq, dk and dv into the projection's gradient and sums the bias gradient in one read
  // instead of a concatenation and a reduction: 1.21-1.37x the split chain for the projection's
  // forward + backward, +0.4% tok/s at 124M, +1.0% at 350M on an H200 (bench/RESULTS.md,
  // 2026-12-04, issue #16). Used with tp = 1; elsewhere, and where the kernel does not take the
  // shapes, LibTorch's split.
  bool fused_qkv = true;
  // The token and position embeddings' backward by kernels::EmbeddingBackward on CUDA: one sort
  // and two passes where LibTorch's sort-based backward runs a dozen kernels (~0.95 ms of a
  // GPT-2 124M step on an H100, bench/RESULTS.md, 2026-12-06, issue #16); the forward is
  // LibTorch's lookup either way. Elsewhere, and for rows that are not whole 16-byte vectors,
  // LibTorch's backward.
  bool fused_embedding = true;
  // The attention's output projection and fc2 without their biases in the GEMM: each bias is
  // added by the next LayerNorm's kernel with the residual (kernels::FusedAddLayerNorm's
  // residual_bias), and its gradient summed by that LayerNorm's backward, which writes the rows it
  // sums, instead of a ColumnSum pass over the projection's and fc2's output gradients (two reads
  // of [tokens, h] a layer). Used in training mode with fused_layernorm, tp = 1 and no hidden
  // dropout (the bias would be added after LibTorch's dropout, not before) unless
  // fused_dropout_add puts the dropout in the same kernel; elsewhere, and in eval mode, the
  // biases stay in the GEMMs. The same parameters and checkpoints either way.
  bool fold_linear_bias = true;
  // Hidden dropout inside the next LayerNorm's kernel (kernels::FusedAddLayerNorm's dropout_p:
  // Megatron's bias-dropout-add, residual + dropout(x + bias), the masks drawn in the kernel and
  // drawn again by its backward, none stored), which also lets fold_linear_bias run with hidden
  // dropout. Used in training mode with fused_layernorm and tp = 1; elsewhere LibTorch's dropout.
  // Off by default: on an H200 (bench/RESULTS.md, Dec 6 2026) the 124M step with dropout 0.1 runs
  // at 0.999x the unfused one and its peak memory is 0.56 GiB lower; the masks differ from
  // LibTorch's (same distribution), so a run's losses differ from one without it.
  bool fused_dropout_add = false;

  // From spec.model (and the recompute fields of spec.training, the TP size of
  // spec.parallel). Unset fields take the defaults written in proto/mt/v1/job_spec.proto;
  // model.vocab_size 0 becomes GPT-2 BPE's 50257. Returns Validate()'s error.
  static absl::StatusOr<GptConfig> FromSpec(const mt::v1::JobSpec& spec);

  // Fills the "0 = derived" fields; Validate() and the accessors below assume it ran.
  GptConfig& Resolve();
  absl::Status Validate() const;
  std::string DebugString() const;

  int64_t ffn_size() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int64_t head_dim() const {
    return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads;
  }
  int64_t max_positions() const {
    return max_position_embeddings > 0 ? max_position_embeddings : seq_length;
  }
  // Megatron's _vocab_size_with_padding: the next multiple of make_vocab_size_divisible_by *
  // tensor_model_parallel_size (50257 -> 50304 with the defaults).
  int64_t padded_vocab_size() const;
};

// Megatron's padding rule as a free function.
int64_t PaddedVocabSize(int64_t vocab_size, int64_t divisible_by, int64_t tp_size);

// Number of parameters of the model GptModel builds from `config` (padded vocabulary,
// position embeddings, every weight, bias and LayerNorm; the output layer counted once when
// tied). Equals the sum of numel() over GptModel::parameters().
int64_t CountParameters(const GptConfig& config);

// Model FLOPs per token of a training step (forward + backward), DESIGN.md §9:
//   6 * params + 12 * layers * hidden * seq.
double TrainingFlopsPerToken(int64_t num_parameters, int64_t num_layers, int64_t hidden_size,
                             int64_t seq_length);

// Model FLOPs utilisation: tokens/s * TrainingFlopsPerToken / peak FLOP/s. 0 when the peak
// is not known (<= 0).
double ModelFlopsUtilization(double tokens_per_second, double flops_per_token,
                             double peak_flops_per_second);

}  // namespace mt::model

#endif  // MT_WORKER_MODEL_GPT_CONFIG_H_
