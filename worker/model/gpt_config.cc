#include "worker/model/gpt_config.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::model {
namespace {

constexpr int64_t kGpt2BpeVocabSize = 50257;

const char* GranularityName(RecomputeGranularity g) {
  switch (g) {
    case RecomputeGranularity::kNone:
      return "none";
    case RecomputeGranularity::kFull:
      return "full";
    case RecomputeGranularity::kSelective:
      return "selective";
  }
  return "?";
}

const char* BackendName(AttentionBackend b) {
  switch (b) {
    case AttentionBackend::kAuto:
      return "auto";
    case AttentionBackend::kMath:
      return "math";
    case AttentionBackend::kFused:
      return "fused";
    case AttentionBackend::kCudnn:
      return "cudnn";
    case AttentionBackend::kFlash:
      return "flash";
  }
  return "?";
}

}  // namespace

int64_t PaddedVocabSize(int64_t vocab_size, int64_t divisible_by, int64_t tp_size) {
  const int64_t multiple = divisible_by * tp_size;
  if (multiple <= 0) return vocab_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

int64_t GptConfig::padded_vocab_size() const {
  return PaddedVocabSize(vocab_size, make_vocab_size_divisible_by, tensor_model_parallel_size);
}

absl::StatusOr<GptConfig> GptConfig::FromSpec(const mt::v1::JobSpec& spec) {
  const mt::v1::ModelSpec& m = spec.model();
  const mt::v1::TrainingSpec& t = spec.training();
  GptConfig c;
  c.num_layers = m.num_layers();
  c.hidden_size = m.hidden_size();
  c.num_attention_heads = m.num_attention_heads();
  c.ffn_hidden_size = m.ffn_hidden_size();
  c.kv_channels = m.kv_channels();
  c.seq_length = m.seq_length();
  c.max_position_embeddings = m.max_position_embeddings();
  c.vocab_size = m.vocab_size() > 0 ? m.vocab_size() : kGpt2BpeVocabSize;
  c.make_vocab_size_divisible_by = m.has_make_vocab_size_divisible_by()
                                       ? m.make_vocab_size_divisible_by()
                                       : spec::kDefaultMakeVocabSizeDivisibleBy;
  c.tensor_model_parallel_size = std::max<int64_t>(1, spec.parallel().tensor_model_parallel_size());
  c.hidden_dropout = m.has_hidden_dropout() ? m.hidden_dropout() : spec::kDefaultDropout;
  c.attention_dropout = m.has_attention_dropout() ? m.attention_dropout() : spec::kDefaultDropout;
  c.init_method_std = m.has_init_method_std() ? m.init_method_std() : spec::kDefaultInitMethodStd;
  c.layernorm_epsilon =
      m.has_layernorm_epsilon() ? m.layernorm_epsilon() : spec::kDefaultLayernormEpsilon;
  c.untie_embeddings_and_output_weights = m.untie_embeddings_and_output_weights();
  switch (t.recompute_granularity()) {
    case mt::v1::RECOMPUTE_GRANULARITY_FULL:
      c.recompute_granularity = RecomputeGranularity::kFull;
      break;
    case mt::v1::RECOMPUTE_GRANULARITY_SELECTIVE:
      c.recompute_granularity = RecomputeGranularity::kSelective;
      break;
    default:
      c.recompute_granularity = RecomputeGranularity::kNone;
  }
  c.recompute_method = t.recompute_method() == mt::v1::RECOMPUTE_METHOD_BLOCK
                           ? RecomputeMethod::kBlock
                           : RecomputeMethod::kUniform;
  c.recompute_num_layers = t.recompute_num_layers() > 0 ? t.recompute_num_layers() : 1;
  c.Resolve();
  absl::Status s = c.Validate();
  if (!s.ok()) return s;
  return c;
}

GptConfig& GptConfig::Resolve() {
  if (ffn_hidden_size == 0) ffn_hidden_size = 4 * hidden_size;
  if (kv_channels == 0 && num_attention_heads > 0 && hidden_size % num_attention_heads == 0) {
    kv_channels = hidden_size / num_attention_heads;
  }
  if (max_position_embeddings == 0) max_position_embeddings = seq_length;
  if (recompute_num_layers <= 0) recompute_num_layers = 1;
  return *this;
}

absl::Status GptConfig::Validate() const {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (num_layers < 1) return bad("model.num_layers ", num_layers, " must be >= 1");
  if (hidden_size < 1) return bad("model.hidden_size ", hidden_size, " must be >= 1");
  if (num_attention_heads < 1) {
    return bad("model.num_attention_heads ", num_attention_heads, " must be >= 1");
  }
  if (kv_channels == 0 && hidden_size % num_attention_heads != 0) {
    return bad("model.hidden_size ", hidden_size, " is not divisible by num_attention_heads ",
               num_attention_heads, " (set kv_channels or change one of them)");
  }
  if (kv_channels < 0 || head_dim() < 1)
    return bad("model.kv_channels ", kv_channels, " must be >= 1");
  if (ffn_size() < 1) return bad("model.ffn_hidden_size ", ffn_hidden_size, " must be >= 1");
  if (seq_length < 1) return bad("model.seq_length ", seq_length, " must be >= 1");
  if (max_positions() < seq_length) {
    return bad("model.max_position_embeddings ", max_position_embeddings, " < seq_length ",
               seq_length);
  }
  if (vocab_size < 1) return bad("model.vocab_size ", vocab_size, " must be >= 1");
  if (make_vocab_size_divisible_by < 1) {
    return bad("model.make_vocab_size_divisible_by ", make_vocab_size_divisible_by,
               " must be >= 1");
  }
  if (!(hidden_dropout >= 0.0 && hidden_dropout < 1.0)) {
    return bad("model.hidden_dropout ", hidden_dropout, " must be in [0, 1)");
  }
  if (!(attention_dropout >= 0.0 && attention_dropout < 1.0)) {
    return bad("model.attention_dropout ", attention_dropout, " must be in [0, 1)");
  }
  if (!(init_method_std > 0.0) || !std::isfinite(init_method_std)) {
    return bad("model.init_method_std ", init_method_std, " must be > 0");
  }
  if (!(layernorm_epsilon > 0.0)) {
    return bad("model.layernorm_epsilon ", layernorm_epsilon, " must be > 0");
  }
  if (recompute_granularity == RecomputeGranularity::kFull &&
      (recompute_num_layers < 1 || recompute_num_layers > num_layers)) {
    return bad("training.recompute_num_layers ", recompute_num_layers, " must be in [1, ",
               num_layers, "] with full recomputation");
  }
  return absl::OkStatus();
}

std::string GptConfig::DebugString() const {
  return absl::StrFormat(
      "GPT layers=%d hidden=%d heads=%d head_dim=%d ffn=%d seq=%d positions=%d vocab=%d "
      "(padded %d) dropout hidden=%g attention=%g init_std=%g ln_eps=%g %s attention=%s "
      "recompute=%s%s%s%s%s%s%s%s%s%s",
      num_layers, hidden_size, num_attention_heads, head_dim(), ffn_size(), seq_length,
      max_positions(), vocab_size, padded_vocab_size(), hidden_dropout, attention_dropout,
      init_method_std, layernorm_epsilon, untie_embeddings_and_output_weights ? "untied" : "tied",
      BackendName(attention_backend), GranularityName(recompute_granularity),
      recompute_granularity == RecomputeGranularity::kFull
          ? absl::StrFormat("(%s, %d layers)",
                            recompute_method == RecomputeMethod::kBlock ? "block" : "uniform",
                            recompute_num_layers)
          : std::string(),
      fused_lm_head ? " lm_head=fused" : "", fused_mlp ? " mlp=fused" : "",
      !fused_mlp || mlp_gelu == kernels::MlpGelu::kAuto ? ""
      : mlp_gelu == kernels::MlpGelu::kKernel           ? " mlp_gelu=kernel"
                                                        : " mlp_gelu=epilogue",
      fused_layernorm ? " layernorm=fused" : "", fused_qkv ? " qkv=fused" : "",
      fused_embedding ? " embedding=fused" : "", fold_linear_bias ? " bias=folded" : "",
      fused_dropout_add ? " dropout=fused" : "");
}

int64_t CountParameters(const GptConfig& c) {
  const int64_t h = c.hidden_size;
  const int64_t proj = c.num_attention_heads * c.head_dim();
  const int64_t f = c.ffn_size();
  const int64_t v = c.padded_vocab_size();
  const int64_t embeddings = v * h + c.max_positions() * h;
  const int64_t per_layer = 2 * h                      // input LayerNorm
                            + h * 3 * proj + 3 * proj  // fused QKV
                            + proj * h + h             // attention output projection
                            + 2 * h                    // pre-MLP LayerNorm
                            + h * f + f                // MLP fc1
                            + f * h + h;               // MLP fc2
  const int64_t final_ln = 2 * h;
  const int64_t output = c.untie_embeddings_and_output_weights ? v * h : 0;
  return embeddings + c.num_layers * per_layer + final_ln + output;
}

double TrainingFlopsPerToken(int64_t num_parameters, int64_t num_layers, int64_t hidden_size,
                             int64_t seq_length) {
  return 6.0 * static_cast<double>(num_parameters) + 12.0 * static_cast<double>(num_layers) *
                                                         static_cast<double>(hidden_size) *
                                                         static_cast<double>(seq_length);
}

double ModelFlopsUtilization(double tokens_per_second, double flops_per_token,
                             double peak_flops_per_second) {
  if (!(peak_flops_per_second > 0.0)) return 0.0;
  return tokens_per_second * flops_per_token / peak_flops_per_second;
}

}  // namespace mt::model
