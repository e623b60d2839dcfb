#include "worker/model/gpt.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/rng.h"
#include "common/base/status_macros.h"
#include "worker/kernels/column_sum.h"
#include "worker/kernels/cross_entropy.h"
#include "worker/kernels/embedding.h"
#include "worker/kernels/fused_mlp.h"
#include "worker/kernels/gemv.h"
#include "worker/kernels/int8_linear.h"
#include "worker/kernels/layer_norm.h"
#include "worker/kernels/qkv_heads.h"
#include "worker/model/recompute.h"
#include "worker/model/sdpa_backend.h"
#include "worker/model/sharding.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/tensor_parallel.h"
#include "worker/parallel/tp_overlap.h"

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

// x [..., in] -> x w^T + b [..., out]. With a bias, one addmm over x flattened to 2-D (what
// ATen's at::linear does for a contiguous 3-D input): on CUDA the bias is added in the GEMM's
// epilogue (cuBLASLt). LibTorch C++'s torch::nn::functional::linear instead runs matmul and
// then `+= bias` as a separate broadcast pass, which was 10% of a GPT-2 124M step on an H200
// (bench/RESULTS.md, issue #16).
//
// A few rows without autograd (a decode step at batch <= 8) take kernels::Gemv on CUDA: it
// streams the weight at more of the memory's bandwidth than cuBLAS does for one row. Training on
// CUDA takes kernels::LinearWithBias: the same addmm, with the bias gradient summed by
// kernels::ColumnSum in backward instead of LibTorch's generic reduction.
torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {}) {
  if (kernels::GemvAvailable(x, w)) return kernels::Gemv(x, w, b);
  if (!b.defined()) return torch::matmul(x, w.t());
  const bool train = x.is_cuda() && torch::GradMode::is_enabled() && x.requires_grad() &&
                     w.requires_grad() && b.requires_grad();
  auto affine = [&](const torch::Tensor& x2d) {
    return train ? kernels::LinearWithBias(x2d, w, b) : torch::addmm(b, x2d, w.t());
  };
  if (x.dim() == 2) return affine(x);
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = w.size(0);
  return affine(x.reshape({-1, x.size(-1)})).view(sizes);
}

// Dropout of an activation that is sharded over the TP group (each rank its own mask).
torch::Tensor ShardedDropout(const torch::Tensor& x, double p, bool training, int tp_rank) {
  if (!training || p <= 0.0) return x;
  return parallel::WithTensorParallelRng(x.device(), tp_rank,
                                         [&] { return torch::dropout(x, p, /*train=*/true); });
}

// The input of a column-parallel matmul: the full activation on every TP rank (all-gathered
// along the sequence under SP), with the all-reduce / reduce-scatter of its gradient.
torch::Tensor ToColumnParallel(const torch::Tensor& x, const parallel::GroupHandle* group,
                               bool sequence_parallel) {
  TORCH_CHECK(group != nullptr, "a tensor-parallel model needs its TP group to run");
  return sequence_parallel ? parallel::GatherFromSequenceParallelRegion(x, group)
                           : parallel::CopyToTensorParallelRegion(x, group);
}

// A seed for the initial weights when the caller gives none: from the default CPU generator.
uint64_t DrawSeed() {
  return static_cast<uint64_t>(
      torch::randint(std::numeric_limits<int64_t>::max(), {1}, torch::kLong).item<int64_t>());
}

// This rank's part of parameter `name` drawn as normal(0, std): the whole parameter in fp32
// on the CPU from a generator seeded with (seed, name), then sliced per sharding.h.
torch::Tensor DrawShard(const std::string& name, const torch::Tensor& param, double std,
                        uint64_t seed, const ModelShard& shard) {
  const TpSplit split = TensorParallelSplit(name);
  std::vector<int64_t> shape(param.sizes().begin(), param.sizes().end());
  const int64_t dim = split == TpSplit::kDim0 ? 0 : 1;
  if (split != TpSplit::kReplicated) shape[dim] *= shard.tp_size;
  at::Generator gen =
      at::make_generator<at::CPUGeneratorImpl>(SplitMix64(seed ^ Fnv1a(name.data(), name.size())));
  torch::Tensor full = torch::empty(shape, torch::kFloat).normal_(0.0, std, gen);
  if (split == TpSplit::kReplicated) return full;
  const int64_t part = param.size(dim);
  return full.narrow(dim, shard.tp_rank * part, part);
}

absl::Status ValidateShard(const GptConfig& c, const ModelShard& s) {
  const int tp = s.tp_size;
  if (tp < 1 || s.tp_rank < 0 || s.tp_rank >= tp) {
    return absl::InvalidArgumentError(
        absl::StrCat("model shard: tensor-parallel rank ", s.tp_rank, " outside a group of ", tp));
  }
  if (s.tp_group != nullptr && (s.tp_group->size != tp || s.tp_group->rank != s.tp_rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model shard: tp_size ", tp, " / tp_rank ", s.tp_rank, " disagree with the TP group ",
        s.tp_group->name, " (size ", s.tp_group->size, ", rank ", s.tp_group->rank, ")"));
  }
  auto divides = [tp](int64_t v, const char* what) -> absl::Status {
    if (v % tp == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(what, " ", v,
                                                   " is not divisible by the tensor-parallel "
                                                   "size ",
                                                   tp));
  };
  MT_RETURN_IF_ERROR(divides(c.num_attention_heads, "model.num_attention_heads"));
  MT_RETURN_IF_ERROR(divides(c.ffn_size(), "model.ffn_hidden_size"));
  MT_RETURN_IF_ERROR(divides(c.padded_vocab_size(), "the padded vocabulary"));
  if (s.sequence_parallel && tp > 1) {
    MT_RETURN_IF_ERROR(divides(c.seq_length, "model.seq_length (sequence parallelism)"));
  }
  for (size_t i = 0; i < s.layers.size(); ++i) {
    if (s.layers[i] < 0 || s.layers[i] >= c.num_layers ||
        (i > 0 && s.layers[i] != s.layers[i - 1] + 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("model shard: layers must be consecutive global indices in [0, ",
                       c.num_layers, "); got ", s.layers[i], " at position ", i));
    }
  }
  return absl::OkStatus();
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
  if (backend == AttentionBackend::kCudnn || backend == AttentionBackend::kFlash) {
    return RestrictedCausalSdpa(q, k, v, training ? dropout_p : 0.0, backend);
  }
#if MT_HAVE_FUSED_SDPA
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, training ? dropout_p : 0.0,
                                          /*is_causal=*/true);
#else
  TORCH_CHECK(false, "fused attention needs LibTorch >= 2.0; this is ", TORCH_VERSION);
#endif
}

// ---------------------------------------------------------------------------------------------
// Tensor-parallel layers

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, bool with_bias,
                                                   const ModelShard& shard,
                                                   const torch::TensorOptions& options)
    : group_(shard.group()),
      sequence_parallel_(shard.sequence_parallel),
      tp_comm_overlap_(shard.sequence_parallel && shard.tp_comm_overlap),
      tp_size_(shard.tp_size) {
  weight = register_parameter("weight", torch::empty({out / tp_size_, in}, options));
  if (with_bias) bias = register_parameter("bias", torch::empty({out / tp_size_}, options));
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  if (int8.q.defined()) return kernels::Int8Linear(x, int8, bias);  // tp = 1 (quantize.h)
  if (tp_size_ == 1) return Linear(x, weight, bias);
  if (tp_comm_overlap_) return parallel::AllGatherLinear(x, weight, bias, group_);
  return Linear(ToColumnParallel(x, group_, sequence_parallel_), weight, bias);
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, bool with_bias,
                                             const ModelShard& shard,
                                             const torch::TensorOptions& options)
    : group_(shard.group()),
      sequence_parallel_(shard.sequence_parallel),
      tp_comm_overlap_(shard.sequence_parallel && shard.tp_comm_overlap),
      tp_size_(shard.tp_size) {
  weight = register_parameter("weight", torch::empty({out, in / tp_size_}, options));
  if (with_bias) bias = register_parameter("bias", torch::empty({out}, options));
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  if (int8.q.defined()) return kernels::Int8Linear(x, int8, bias);  // tp = 1 (quantize.h)
  if (tp_size_ == 1) return Linear(x, weight, bias);
  TORCH_CHECK(group_ != nullptr, "a tensor-parallel model needs its TP group to run");
  if (tp_comm_overlap_) {
    torch::Tensor y = parallel::LinearReduceScatter(x, weight, group_);
    return bias.defined() ? y + bias : y;
  }
  torch::Tensor y = Linear(x, weight);
  y = sequence_parallel_ ? parallel::ReduceScatterToSequenceParallelRegion(y, group_)
                         : parallel::ReduceFromTensorParallelRegion(y, group_);
  return bias.defined() ? y + bias : y;
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab, int64_t hidden,
                                                       const ModelShard& shard,
                                                       const torch::TensorOptions& options)
    : tp_size_(shard.tp_size) {
  std::tie(vocab_start, vocab_end) = parallel::VocabRange(vocab, shard.tp_rank, shard.tp_size);
  weight = register_parameter("weight", torch::empty({vocab_end - vocab_start, hidden}, options));
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& tokens) {
  auto lookup = [this](const torch::Tensor& rows) {
    return fused_backward ? kernels::Embedding(weight, rows) : torch::embedding(weight, rows);
  };
  // The whole table (no TP): torch::nn::Embedding's lookup.
  if (tp_size_ == 1) return lookup(tokens);
  const torch::Tensor outside = tokens.lt(vocab_start).logical_or(tokens.ge(vocab_end));
  const torch::Tensor local = (tokens - vocab_start).masked_fill(outside, 0);
  return lookup(local).masked_fill(outside.unsqueeze(-1), 0.0);
}

// ---------------------------------------------------------------------------------------------
// The transformer

SelfAttentionImpl::SelfAttentionImpl(const GptConfig& c, const ModelShard& shard,
                                     const torch::TensorOptions& options)
    : config(c), tp_size(shard.tp_size), tp_rank(shard.tp_rank) {
  const int64_t proj = c.num_attention_heads * c.head_dim();
  linear_qkv = register_module(
      "linear_qkv", ColumnParallelLinear(c.hidden_size, 3 * proj, /*bias=*/true, shard, options));
  linear_proj = register_module(
      "linear_proj", RowParallelLinear(proj, c.hidden_size, /*bias=*/true, shard, options));
}

std::vector<torch::Tensor> SelfAttentionImpl::ProjectQkv(const torch::Tensor& x, int64_t heads,
                                                         int64_t d) {
  const torch::Tensor &w = linear_qkv->weight, &bias = linear_qkv->bias;
  if (config.fused_qkv && tp_size == 1 && !linear_qkv->int8.q.defined() &&
      kernels::QkvHeadsAvailable(x, w, bias, heads, d)) {
    return kernels::QkvHeads(x, w, bias, heads, d);
  }
  const torch::Tensor qkv_out = linear_qkv(x);
  const int64_t b = qkv_out.size(0);
  const int64_t s = qkv_out.size(1);
  std::vector<torch::Tensor> qkv = qkv_out.view({b, s, heads, 3 * d}).split(d, -1);
  for (torch::Tensor& t : qkv) t = t.transpose(1, 2);
  return qkv;
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) { return linear_proj(Context(x)); }

std::pair<torch::Tensor, torch::Tensor> SelfAttentionImpl::ForwardWithoutBias(
    const torch::Tensor& x) {
  TORCH_CHECK(tp_size == 1 && linear_proj->bias.defined(),
              "the output projection's bias is left out only at tp = 1, with a bias");
  const torch::Tensor context = Context(x);
  const torch::Tensor& w = linear_proj->weight;
  std::vector<int64_t> sizes = context.sizes().vec();
  sizes.back() = w.size(0);
  return {kernels::LinearWithoutBias(context.reshape({-1, context.size(-1)}), w).view(sizes),
          linear_proj->bias};
}

torch::Tensor SelfAttentionImpl::Context(const torch::Tensor& x) {
  // [b, s, heads/tp, 3d] -> q, k, v [b, heads/tp, s, d]; s is the full sequence even under SP
  // (linear_qkv all-gathers it).
  const int64_t heads = config.num_attention_heads / tp_size;
  const int64_t d = config.head_dim();
  const std::vector<torch::Tensor> qkv = ProjectQkv(x, heads, d);
  const torch::Tensor &q = qkv[0], &k = qkv[1], &v = qkv[2];
  const int64_t b = q.size(0);
  const int64_t s = q.size(2);

  const double p = config.attention_dropout;
  const bool training = is_training();
  const AttentionBackend backend = config.attention_backend;
  // Each TP rank holds other heads: their dropout masks must differ (sharded dropout).
  const int rank_stream = tp_size > 1 && training && p > 0.0 ? tp_rank : -1;
  auto attend = [p, training, backend, rank_stream](const std::vector<torch::Tensor>& in) {
    auto run = [&] { return CausalAttention(in[0], in[1], in[2], p, training, backend); };
    return rank_stream >= 0 ? parallel::WithTensorParallelRng(in[0].device(), rank_stream, run)
                            : run();
  };
  torch::Tensor context;
  if (config.recompute_granularity == RecomputeGranularity::kSelective &&
      torch::GradMode::is_enabled()) {
    context = RecomputeInBackward(attend, {q, k, v}, {}, /*preserve_rng=*/training && p > 0.0);
  } else {
    context = attend({q, k, v});
  }
  // [b, heads/tp, s, d] -> [b, s, heads/tp * d]
  return context.transpose(1, 2).reshape({b, s, heads * d});
}

MlpImpl::MlpImpl(const GptConfig& c, const ModelShard& shard, const torch::TensorOptions& options)
    : whole_(shard.tp_size == 1), fused_(c.fused_mlp && shard.tp_size == 1) {
  fused_options_.gelu = c.mlp_gelu;
  linear_fc1 = register_module(
      "linear_fc1", ColumnParallelLinear(c.hidden_size, c.ffn_size(), true, shard, options));
  linear_fc2 = register_module(
      "linear_fc2", RowParallelLinear(c.ffn_size(), c.hidden_size, true, shard, options));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  if (linear_fc1->int8.q.defined()) {
    // Int8 weights (quantize.h): the GELU in the fc1 kernel's epilogue where it runs.
    return linear_fc2(kernels::Int8Linear(x, linear_fc1->int8, linear_fc1->bias, /*gelu=*/true));
  }
  if (whole_ && kernels::GemvAvailable(x, linear_fc1->weight)) {
    // A few rows without autograd (decoding): the GELU in the fc1 kernel's epilogue.
    return linear_fc2(kernels::Gemv(x, linear_fc1->weight, linear_fc1->bias, /*gelu=*/true));
  }
  if (fused_) {
    const torch::Tensor rows = x.reshape({-1, x.size(-1)});
    const torch::Tensor &w1 = linear_fc1->weight, &b1 = linear_fc1->bias;
    const torch::Tensor &w2 = linear_fc2->weight, &b2 = linear_fc2->bias;
    if (kernels::FusedMlpAvailable(rows, w1, b1, w2, b2)) {
      std::vector<int64_t> sizes = x.sizes().vec();
      sizes.back() = w2.size(0);
      return kernels::FusedMlp(rows, w1, b1, w2, b2, fused_options_).view(sizes);
    }
  }
  return linear_fc2(torch::gelu(linear_fc1(x), "tanh"));
}

std::pair<torch::Tensor, torch::Tensor> MlpImpl::ForwardWithoutBias(const torch::Tensor& x) {
  TORCH_CHECK(whole_ && linear_fc2->bias.defined() && !linear_fc1->int8.q.defined(),
              "fc2's bias is left out only at tp = 1, with a bias and no int8 weights");
  const torch::Tensor &w1 = linear_fc1->weight, &b1 = linear_fc1->bias;
  const torch::Tensor &w2 = linear_fc2->weight, &b2 = linear_fc2->bias;
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = w2.size(0);
  const torch::Tensor rows = x.reshape({-1, x.size(-1)});
  if (fused_ && kernels::FusedMlpAvailable(rows, w1, b1, w2, torch::Tensor())) {
    return {kernels::FusedMlp(rows, w1, b1, w2, torch::Tensor(), fused_options_).view(sizes), b2};
  }
  const torch::Tensor h = torch::gelu(linear_fc1(rows), "tanh");
  return {kernels::LinearWithoutBias(h, w2).view(sizes), b2};
}

namespace {

torch::nn::LayerNorm MakeLayerNorm(const GptConfig& c, const torch::TensorOptions& options) {
  torch::nn::LayerNorm ln(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layernorm_epsilon));
  ln->to(options.device(), options.dtype().toScalarType());
  return ln;
}

}  // namespace

TransformerLayerImpl::TransformerLayerImpl(const GptConfig& c, const ModelShard& shard,
                                           const torch::TensorOptions& options)
    : hidden_dropout(c.hidden_dropout),
      tp_rank(shard.tp_rank),
      sharded_dropout(shard.tp_size > 1 && shard.sequence_parallel),
      fused_layernorm(c.fused_layernorm),
      fold_linear_bias(c.fold_linear_bias && c.fused_layernorm && shard.tp_size == 1 &&
                       (c.hidden_dropout <= 0.0 || c.fused_dropout_add)),
      fused_dropout_add(c.fused_dropout_add && c.fused_layernorm && shard.tp_size == 1 &&
                        c.hidden_dropout > 0.0) {
  input_layernorm = register_module("input_layernorm", MakeLayerNorm(c, options));
  self_attention = register_module("self_attention", SelfAttention(c, shard, options));
  pre_mlp_layernorm = register_module("pre_mlp_layernorm", MakeLayerNorm(c, options));
  mlp = register_module("mlp", Mlp(c, shard, options));
}

torch::Tensor TransformerLayerImpl::HiddenDropout(const torch::Tensor& t) {
  const bool training = is_training();
  return sharded_dropout ? ShardedDropout(t, hidden_dropout, training, tp_rank)
                         : Dropout(t, hidden_dropout, training);
}

torch::Tensor TransformerLayerImpl::forward(const torch::Tensor& input) {
  if (fused_layernorm) return ForwardPending(PendingSum{input, {}, {}}).Sum();
  torch::Tensor x = input + HiddenDropout(self_attention(input_layernorm(input)));
  return x + HiddenDropout(mlp(pre_mlp_layernorm(x)));
}

bool TransformerLayerImpl::FoldsLinearBias() const { return fold_linear_bias && is_training(); }

double TransformerLayerImpl::FusedDropout() const {
  return fused_dropout_add && is_training() ? hidden_dropout : 0.0;
}

PendingSum TransformerLayerImpl::ForwardPending(const PendingSum& in) {
  const double eps1 = input_layernorm->options.eps(), eps2 = pre_mlp_layernorm->options.eps();
  torch::Tensor input, normed;
  if (in.delta.defined()) {
    std::tie(input, normed) =
        kernels::FusedAddLayerNorm(in.x, in.delta, input_layernorm->weight, input_layernorm->bias,
                                   eps1, in.delta_bias, in.delta_dropout);
  } else {
    input = in.x;
    normed = kernels::FusedLayerNorm(in.x, input_layernorm->weight, input_layernorm->bias, eps1);
  }
  const torch::Tensor &w2 = pre_mlp_layernorm->weight, &b2 = pre_mlp_layernorm->bias;
  const double p = FusedDropout();
  if (FoldsLinearBias()) {
    // Each bias joins its sum in the next LayerNorm's kernel (with the hidden dropout where it
    // is fused; else there is none).
    const auto [attention, proj_bias] = self_attention->ForwardWithoutBias(normed);
    const auto [x, normed2] =
        kernels::FusedAddLayerNorm(input, attention, w2, b2, eps2, proj_bias, p);
    const auto [delta, fc2_bias] = mlp->ForwardWithoutBias(normed2);
    return {x, delta, fc2_bias, p};
  }
  // The hidden dropout in the next LayerNorm's kernel where it is fused, else here.
  const torch::Tensor attention = self_attention(normed);
  const auto [x, normed2] = kernels::FusedAddLayerNorm(
      input, p > 0.0 ? attention : HiddenDropout(attention), w2, b2, eps2, {}, p);
  const torch::Tensor delta = mlp(normed2);
  return {x, p > 0.0 ? delta : HiddenDropout(delta), {}, p};
}

torch::Tensor PendingSum::Sum() const {
  if (!delta.defined()) return x;
  if (delta_dropout > 0.0) {
    return x + Dropout(delta_bias.defined() ? delta + delta_bias : delta, delta_dropout, true);
  }
  return delta_bias.defined() ? x + delta + delta_bias : x + delta;
}

GptEmbeddingImpl::GptEmbeddingImpl(const GptConfig& c, const ModelShard& shard,
                                   const torch::TensorOptions& options)
    : hidden_dropout(c.hidden_dropout), shard_(shard) {
  word_embeddings =
      register_module("word_embeddings",
                      VocabParallelEmbedding(c.padded_vocab_size(), c.hidden_size, shard, options));
  // Replicated: a whole table on every TP rank.
  position_embeddings = register_module(
      "position_embeddings",
      VocabParallelEmbedding(c.max_positions(), c.hidden_size, ModelShard{}, options));
  word_embeddings->fused_backward = c.fused_embedding;
  position_embeddings->fused_backward = c.fused_embedding;
}

torch::Tensor GptEmbeddingImpl::forward(const torch::Tensor& tokens) {
  const int64_t max_positions = position_embeddings->weight.size(0);
  TORCH_CHECK(tokens.size(1) <= max_positions, "sequence of ", tokens.size(1),
              " tokens is longer than the ", max_positions, " position embeddings");
  const bool tp = shard_.tp_size > 1;
  const bool sp = tp && shard_.sequence_parallel;
  torch::Tensor x = word_embeddings(tokens);  // this rank's partial sum under TP
  if (tp) {
    TORCH_CHECK(shard_.group() != nullptr, "a tensor-parallel model needs its TP group to run");
    x = sp ? parallel::ReduceScatterToSequenceParallelRegion(x, shard_.group())
           : parallel::ReduceFromTensorParallelRegion(x, shard_.group());
  }
  // Under SP this rank holds positions [r s/tp, (r+1) s/tp).
  const int64_t s = x.size(1);
  const int64_t first = sp ? shard_.tp_rank * s : 0;
  const torch::Tensor positions = torch::arange(
      first, first + s, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  x = x + position_embeddings(positions).unsqueeze(0);
  return sp ? ShardedDropout(x, hidden_dropout, is_training(), shard_.tp_rank)
            : Dropout(x, hidden_dropout, is_training());
}

TransformerBlockImpl::TransformerBlockImpl(const GptConfig& c, const ModelShard& shard,
                                           const torch::TensorOptions& options)
    : config(c) {
  auto holder = register_module("layers", std::make_shared<torch::nn::Module>());
  layer_numbers = shard.layers;
  if (layer_numbers.empty()) {
    for (int64_t i = 0; i < c.num_layers; ++i) layer_numbers.push_back(i);
  }
  for (int64_t n : layer_numbers) {
    layers.push_back(
        holder->register_module(std::to_string(n), TransformerLayer(c, shard, options)));
  }
  if (shard.post_process) {
    final_layernorm = register_module("final_layernorm", MakeLayerNorm(c, options));
  }
}

torch::Tensor TransformerBlockImpl::RunLayers(torch::Tensor x, int64_t begin, int64_t end) {
  return RunLayersPending(std::move(x), begin, end).Sum();
}

PendingSum TransformerBlockImpl::RunLayersPending(torch::Tensor x, int64_t begin, int64_t end) {
  PendingSum out{std::move(x), {}, {}};
  for (int64_t i = begin; i < end; ++i) {
    if (before_layer) before_layer(i);
    if (config.fused_layernorm) {
      out = layers[i]->ForwardPending(out);
    } else {
      out = PendingSum{layers[i]->forward(out.x), {}, {}};
    }
  }
  return out;
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& input) {
  const int64_t n = static_cast<int64_t>(layers.size());
  // The final LayerNorm, on the pending sum, the add made by its kernel.
  auto finish = [this, n](const PendingSum& p) {
    if (!final_layernorm) return p.Sum();
    if (before_layer) before_layer(n);
    if (!config.fused_layernorm) return final_layernorm(p.x);
    const auto& ln = final_layernorm;
    if (!p.delta.defined()) {
      return kernels::FusedLayerNorm(p.x, ln->weight, ln->bias, ln->options.eps());
    }
    return kernels::FusedAddLayerNorm(p.x, p.delta, ln->weight, ln->bias, ln->options.eps(),
                                      p.delta_bias, p.delta_dropout)
        .second;
  };
  torch::Tensor x = input;
  if (config.recompute_granularity != RecomputeGranularity::kFull ||
      !torch::GradMode::is_enabled()) {
    return finish(RunLayersPending(x, 0, n));
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
  // Megatron counts recompute_num_layers within the stage.
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
  return finish(PendingSum{x, {}, {}});
}

// ---------------------------------------------------------------------------------------------
// The model

GptModel::GptModel(const GptConfig& config, const ModelShard& shard,
                   const torch::TensorOptions& options)
    : config_(config), shard_(shard) {
  if (shard_.pre_process)
    embedding = register_module("embedding", GptEmbedding(config_, shard_, options));
  decoder = register_module("decoder", TransformerBlock(config_, shard_, options));
  const bool tied = !config_.untie_embeddings_and_output_weights;
  if (shard_.post_process && (!tied || !shard_.pre_process)) {
    // The untied output layer, or a tied last stage's copy of the word embedding.
    output_layer = register_module(
        "output_layer", ColumnParallelLinear(config_.hidden_size, config_.padded_vocab_size(),
                                             /*bias=*/false, shard_, options));
  }
}

absl::StatusOr<std::shared_ptr<GptModel>> GptModel::Create(const GptConfig& config,
                                                           const ModelShard& shard,
                                                           const ModelBuildOptions& options) {
  GptConfig c = config;
  c.Resolve();
  MT_RETURN_IF_ERROR(c.Validate());
  MT_RETURN_IF_ERROR(ValidateShard(c, shard));
  if (c.attention_backend == AttentionBackend::kFused && !FusedAttentionAvailable()) {
    return absl::FailedPreconditionError(
        absl::StrCat("fused attention needs LibTorch >= 2.0; this is ", TORCH_VERSION));
  }
  if ((c.attention_backend == AttentionBackend::kCudnn ||
       c.attention_backend == AttentionBackend::kFlash) &&
      (!SdpaBackendAvailable(c.attention_backend) || !options.device.is_cuda())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "attention backend ", c.attention_backend == AttentionBackend::kCudnn ? "cudnn" : "flash",
        " needs a CUDA device and a CUDA LibTorch >= ",
        c.attention_backend == AttentionBackend::kCudnn ? "2.3" : "2.0", " (this is ",
        TORCH_VERSION, "); use --attention auto"));
  }
  try {
    const torch::TensorOptions tensor_options =
        torch::TensorOptions().device(options.device).dtype(options.dtype);
    std::shared_ptr<GptModel> model(new GptModel(c, shard, tensor_options));
    model->seed_ = options.seed.has_value() ? *options.seed : DrawSeed();
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
  const torch::Tensor shared = shared_output_weight();
  for (const auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    const bool is_bias = absl::EndsWith(name, ".bias");
    if (absl::StrContains(name, "layernorm")) {
      p.fill_(is_bias ? 0.0 : 1.0);
      continue;
    }
    if (is_bias) {
      p.zero_();
      continue;
    }
    const bool scaled = absl::EndsWith(name, ".linear_proj.weight") ||
                        absl::EndsWith(name, ".mlp.linear_fc2.weight");
    // The tied last stage's copy starts as the word embedding itself.
    const std::string draw_name =
        shared.defined() && p.is_same(shared) ? "embedding.word_embeddings.weight" : name;
    p.copy_(DrawShard(draw_name, p, scaled ? scaled_std : std, seed_, shard_));
  }
}

torch::Tensor GptModel::output_weight() const {
  if (!shard_.post_process) return torch::Tensor();
  return output_layer ? output_layer->weight : embedding->word_embeddings->weight;
}

torch::Tensor GptModel::shared_output_weight() const {
  const bool tied = !config_.untie_embeddings_and_output_weights;
  return tied && output_layer ? output_layer->weight : torch::Tensor();
}

std::vector<std::string> GptModel::SequenceParallelParameterNames() const {
  std::vector<std::string> names;
  if (shard_.tp_size <= 1 || !shard_.sequence_parallel) return names;
  for (const auto& item : named_parameters()) {
    if (TensorParallelSplit(item.key()) == TpSplit::kReplicated) names.push_back(item.key());
  }
  return names;
}

std::vector<torch::Tensor> GptModel::SequenceParallelGradients() const {
  std::vector<torch::Tensor> grads;
  if (shard_.tp_size <= 1 || !shard_.sequence_parallel) return grads;
  for (const auto& item : named_parameters()) {
    if (TensorParallelSplit(item.key()) == TpSplit::kReplicated && item.value().grad().defined()) {
      grads.push_back(item.value().grad());
    }
  }
  return grads;
}

torch::Tensor GptModel::OutputLoss(const torch::Tensor& hidden, const torch::Tensor& targets) {
  const torch::Tensor weight = output_weight();
  if (shard_.tp_size == 1 && config_.fused_lm_head) {
    return kernels::FusedLinearCrossEntropy(hidden.reshape({-1, hidden.size(-1)}), weight,
                                            targets.reshape({-1}));
  }
  if (shard_.tp_size == 1) {
    torch::Tensor logits = Linear(hidden, weight);
    const int64_t vocab = logits.size(-1);
    // On CUDA one fused kernel (worker/kernels/cross_entropy.h) that reuses the logits' memory
    // for their gradient; elsewhere cross_entropy on the logits upcast to fp32 (fp64 stays).
    return kernels::FusedCrossEntropy(logits.view({-1, vocab}), targets.reshape({-1}));
  }
  const torch::Tensor logits =
      Linear(ToColumnParallel(hidden, shard_.group(), shard_.sequence_parallel), weight);
  const int64_t shard = logits.size(-1);
  const int64_t vocab_start = shard_.tp_rank * shard;
  return parallel::VocabParallelCrossEntropy(logits.reshape({-1, shard}), targets.reshape({-1}),
                                             vocab_start, shard_.group())
      .mean();
}

int64_t GptModel::num_forward_parts() const {
  return (shard_.pre_process ? 1 : 0) + static_cast<int64_t>(decoder->layers.size()) +
         (shard_.post_process ? 1 : 0);
}

int64_t GptModel::ForwardPartOf(const std::string& name) const {
  const int64_t first_layer = shard_.pre_process ? 1 : 0;
  if (shard_.pre_process && absl::StartsWith(name, "embedding.")) return 0;
  const int64_t layer = LayerIndexOf(name);
  if (layer >= 0) {
    const std::vector<int64_t>& numbers = decoder->layer_numbers;
    for (size_t i = 0; i < numbers.size(); ++i) {
      if (numbers[i] == layer) return first_layer + static_cast<int64_t>(i);
    }
    return -1;
  }
  if (shard_.post_process && (absl::StartsWith(name, "decoder.final_layernorm.") ||
                              absl::StartsWith(name, "output_layer."))) {
    return first_layer + static_cast<int64_t>(decoder->layers.size());
  }
  return -1;
}

void GptModel::SetForwardPreHook(std::function<void(int64_t part)> hook) {
  pre_hook_ = std::move(hook);
  if (!pre_hook_) {
    decoder->before_layer = nullptr;
    return;
  }
  const int64_t first_layer = shard_.pre_process ? 1 : 0;
  decoder->before_layer = [this, first_layer](int64_t i) { pre_hook_(first_layer + i); };
}

torch::Tensor GptModel::forward(const torch::Tensor& tokens) {
  TORCH_CHECK(shard_.pre_process && shard_.post_process,
              "GptModel::forward needs the whole model; a pipeline stage runs ForwardStage");
  if (pre_hook_) pre_hook_(0);
  const torch::Tensor x = decoder(embedding(tokens));
  if (shard_.tp_size == 1) return Linear(x, output_weight());
  return Linear(ToColumnParallel(x, shard_.group(), shard_.sequence_parallel), output_weight());
}

torch::Tensor GptModel::ForwardStage(const torch::Tensor& input, const torch::Tensor& targets) {
  if (shard_.pre_process && pre_hook_) pre_hook_(0);
  torch::Tensor x = shard_.pre_process ? embedding(input) : input;
  x = decoder(x);
  if (!shard_.post_process) return x;
  TORCH_CHECK(targets.defined(), "the last pipeline stage needs the targets");
  return OutputLoss(x, targets);
}

torch::Tensor GptModel::Loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  TORCH_CHECK(shard_.pre_process && shard_.post_process,
              "GptModel::Loss needs the whole model; a pipeline stage runs ForwardStage");
  return ForwardStage(tokens, targets);
}

torch::Tensor GptModel::LossOnSample(const torch::Tensor& tokens_and_targets) {
  const int64_t s = tokens_and_targets.size(1) - 1;
  return Loss(tokens_and_targets.narrow(1, 0, s), tokens_and_targets.narrow(1, 1, s));
}

void GptModel::PropagateConfig() {
  decoder->config = config_;
  for (TransformerLayer& layer : decoder->layers) layer->self_attention->config = config_;
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
