#include "common/spec/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/confine.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"
#include "common/spec/defaults.h"
#include "common/spec/inference.h"
#include "common/spec/megatron_flags.h"
#include "common/spec/spec_internal.h"

namespace mt::spec {
namespace {

using absl::StrCat;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using internal::FormatDouble;
using internal::Quote;

constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHidden = 65536;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxSeqLength = 1048576;
constexpr int64_t kMaxMakeVocabDivisibleBy = 65536;
constexpr int64_t kMaxTensorParallel = 64;
constexpr int64_t kMaxPipelineParallel = 1024;
constexpr int64_t kMaxContextParallel = 65536;
constexpr int64_t kMaxWorldSize = 1048576;
constexpr int64_t kMaxMicroBatch = 65536;
// Longest run (steps or samples): far past any real run, far from overflowing step * batch.
constexpr int64_t kMaxTrainLength = 1'000'000'000'000;
constexpr int64_t kMaxGlobalBatch = 16777216;
constexpr double kMaxLr = 10;
constexpr int kMaxDataPaths = 1024;
constexpr int64_t kMaxNumWorkers = 64;
constexpr int64_t kMaxRestarts = 100;
constexpr int64_t kMaxTimeoutSeconds = 86400;
constexpr int64_t kMinPriority = -1000;
constexpr int64_t kMaxPriority = 1000;
constexpr size_t kMaxNameLength = 128;
constexpr size_t kMaxNodeNameLength = 253;
constexpr size_t kMaxStringBytes = 4096;

// Fields that hold file system paths (checked with ValidatePath, made absolute by
// ResolveRelativePaths), by their full proto name.
const std::set<std::string>& PathFields() {
  static const auto* fields = new std::set<std::string>{"mt.v1.DataPath.prefix",
                                                        "mt.v1.TokenizerSpec.vocab_file",
                                                        "mt.v1.TokenizerSpec.merge_file",
                                                        "mt.v1.DataSpec.data_cache_path",
                                                        "mt.v1.CheckpointSpec.save_dir",
                                                        "mt.v1.CheckpointSpec.load_dir",
                                                        "mt.v1.LoggingSpec.tensorboard_dir",
                                                        "mt.v1.InferenceSpec.checkpoint_dir",
                                                        "mt.v1.EvalTask.data_path"};
  return *fields;
}

// Text a user writes, not a name or a path (a generation job's prompt and stop text): any UTF-8
// without NUL, its size bounded by common/spec/inference.h; never run, so shell syntax is fine.
bool IsFreeText(const FieldDescriptor* f) {
  return f->full_name() == "mt.v1.GenerateTask.prompt" ||
         f->full_name() == "mt.v1.GenerateTask.stop";
}

// "model.num_layers (--num-layers)" when the field has a Megatron flag.
std::string WithFlag(absl::string_view path) {
  const std::string flag = MegatronFlagForField(path);
  return flag.empty() ? std::string(path) : StrCat(path, " (", flag, ")");
}

int64_t RoundUpToMultiple(int64_t value, int64_t m) {
  if (value <= 0) return m;
  return ((value + m - 1) / m) * m;
}

// The divisors of n that are at most `limit`, as "1, 2, 4".
std::string Divisors(int64_t n, int64_t limit) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= std::min(n, limit); ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return absl::StrJoin(out, ", ");
}

bool IsNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

bool MatchesName(absl::string_view s, size_t max_length) {
  if (s.empty() || s.size() > max_length) return false;
  for (char c : s) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

class Checker {
 public:
  void Add(std::string problem) { problems_.push_back(std::move(problem)); }

  // A required integer: 0 means "not given".
  void Required(absl::string_view path, int64_t v, int64_t lo, int64_t hi, absl::string_view what) {
    if (v == 0) {
      Add(StrCat(WithFlag(path), " is required: set ", what, ", ", lo, "..", hi));
    } else {
      Range(path, v, lo, hi);
    }
  }
  void Range(absl::string_view path, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) Add(StrCat(path, " (", v, ") is out of range ", lo, "..", hi));
  }
  void NonNegative(absl::string_view path, int64_t v, absl::string_view zero_means = "") {
    if (v < 0) {
      Add(StrCat(path, " (", v, ") must be >= 0",
                 zero_means.empty() ? "" : StrCat(" (0 = ", zero_means, ")")));
    }
  }
  // The comparisons are written so that NaN fails them.
  void Unit(absl::string_view path, double v) {
    if (!(v >= 0 && v <= 1)) Add(StrCat(path, " (", FormatDouble(v), ") must be in [0, 1]"));
  }
  void UnitOpen(absl::string_view path, double v) {
    if (!(v >= 0 && v < 1)) Add(StrCat(path, " (", FormatDouble(v), ") must be in [0, 1)"));
  }
  void Positive(absl::string_view path, double v) {
    if (!(v > 0 && std::isfinite(v))) Add(StrCat(path, " (", FormatDouble(v), ") must be > 0"));
  }
  void NonNegativeNumber(absl::string_view path, double v) {
    if (!(v >= 0 && std::isfinite(v))) {
      Add(StrCat(path, " (", FormatDouble(v), ") must be >= 0"));
    }
  }
  void Path(absl::string_view path_value, absl::string_view field) {
    if (absl::Status s = ValidatePath(path_value, field); !s.ok()) Add(std::string(s.message()));
  }

  std::vector<std::string> Take() { return std::move(problems_); }

 private:
  std::vector<std::string> problems_;
};

// The sizes the layout uses, with defaults for unset (0) values.
struct Dims {
  int64_t tp = 1, pp = 1, cp = 1;
  int64_t dp = 0;  // 0 = unknown (auto)
  bool dp_explicit = false;
};

Dims EffectiveDims(const mt::v1::ParallelSpec& p) {
  Dims d;
  d.tp = p.tensor_model_parallel_size() == 0 ? 1 : p.tensor_model_parallel_size();
  d.pp = p.pipeline_model_parallel_size() == 0 ? 1 : p.pipeline_model_parallel_size();
  d.cp = p.context_parallel_size() == 0 ? 1 : p.context_parallel_size();
  if (p.data_parallel_size() > 0) {
    d.dp = p.data_parallel_size();
    d.dp_explicit = true;
  } else if (p.world_size() > 0 && d.tp > 0 && d.pp > 0 && d.cp > 0 &&
             p.world_size() % (d.tp * d.cp * d.pp) == 0) {
    d.dp = p.world_size() / (d.tp * d.cp * d.pp);
  }
  return d;
}

void CheckJob(const mt::v1::JobSpec& s, Checker* c) {
  // A name with shell syntax is reported once, by the string checks.
  if (!s.name().empty() && internal::FindShellMetacharacters(s.name()).empty() &&
      !MatchesName(s.name(), kMaxNameLength)) {
    c->Add(StrCat("name (", Quote(s.name()), ") must be 1..", kMaxNameLength,
                  " characters of [A-Za-z0-9._-]"));
  }
  c->Range("priority", s.priority(), kMinPriority, kMaxPriority);
}

void CheckModel(const mt::v1::JobSpec& s, const Dims& dims, Checker* c) {
  const mt::v1::ModelSpec& m = s.model();
  c->Required("model.num_layers", m.num_layers(), 1, kMaxLayers,
              "the number of transformer layers");
  c->Required("model.hidden_size", m.hidden_size(), 1, kMaxHidden, "the model width");
  c->Required("model.num_attention_heads", m.num_attention_heads(), 1, kMaxHeads,
              "the number of attention heads");
  c->Required("model.seq_length", m.seq_length(), 1, kMaxSeqLength, "the tokens per sample");
  const bool hidden_ok = m.hidden_size() >= 1 && m.hidden_size() <= kMaxHidden;
  const bool heads_ok = m.num_attention_heads() >= 1 && m.num_attention_heads() <= kMaxHeads;
  if (hidden_ok && heads_ok && m.hidden_size() % m.num_attention_heads() != 0) {
    const int64_t heads = m.num_attention_heads();
    c->Add(StrCat("model.hidden_size (", m.hidden_size(),
                  ") must be divisible by model.num_attention_heads (", heads,
                  "); choose a multiple of ", heads, " such as ",
                  RoundUpToMultiple(m.hidden_size(), heads)));
  }
  c->NonNegative("model.ffn_hidden_size", m.ffn_hidden_size(), "4 * hidden_size");
  c->NonNegative("model.kv_channels", m.kv_channels(), "hidden_size / num_attention_heads");
  if (m.max_position_embeddings() != 0 && m.max_position_embeddings() < m.seq_length()) {
    c->Add(StrCat("model.max_position_embeddings (", m.max_position_embeddings(),
                  ") must be >= model.seq_length (", m.seq_length(),
                  "); raise it or leave it 0 (= seq_length)"));
  } else {
    c->NonNegative("model.max_position_embeddings", m.max_position_embeddings(), "seq_length");
  }
  c->NonNegative("model.vocab_size", m.vocab_size(), "the tokenizer's");
  if (m.has_make_vocab_size_divisible_by()) {
    c->Range("model.make_vocab_size_divisible_by", m.make_vocab_size_divisible_by(), 1,
             kMaxMakeVocabDivisibleBy);
  }
  if (m.has_hidden_dropout()) c->Unit("model.hidden_dropout", m.hidden_dropout());
  if (m.has_attention_dropout()) c->Unit("model.attention_dropout", m.attention_dropout());
  if (m.has_init_method_std()) c->Positive("model.init_method_std", m.init_method_std());
  if (m.has_layernorm_epsilon()) c->Positive("model.layernorm_epsilon", m.layernorm_epsilon());

  // Tensor parallelism splits heads, the hidden dimension and the MLP across TP ranks.
  const mt::v1::ParallelSpec& p = s.parallel();
  if (dims.tp > 1 && dims.tp <= kMaxTensorParallel) {
    if (heads_ok && m.num_attention_heads() % dims.tp != 0) {
      c->Add(StrCat("parallel.tensor_model_parallel_size (", dims.tp,
                    ") must divide model.num_attention_heads (", m.num_attention_heads(),
                    "); choose one of ", Divisors(m.num_attention_heads(), kMaxTensorParallel)));
    }
    if (hidden_ok && m.hidden_size() % dims.tp != 0) {
      c->Add(StrCat("parallel.tensor_model_parallel_size (", dims.tp,
                    ") must divide model.hidden_size (", m.hidden_size(), ")"));
    }
    if (m.ffn_hidden_size() > 0 && m.ffn_hidden_size() % dims.tp != 0) {
      c->Add(StrCat("model.ffn_hidden_size (", m.ffn_hidden_size(),
                    ") must be divisible by parallel.tensor_model_parallel_size (", dims.tp,
                    "); choose a multiple of ", dims.tp, " such as ",
                    RoundUpToMultiple(m.ffn_hidden_size(), dims.tp)));
    }
    if (p.sequence_parallel() && m.seq_length() > 0 && m.seq_length() % dims.tp != 0) {
      c->Add(StrCat("model.seq_length (", m.seq_length(),
                    ") must be divisible by parallel.tensor_model_parallel_size (", dims.tp,
                    ") with parallel.sequence_parallel; choose a multiple of ", dims.tp,
                    " such as ", RoundUpToMultiple(m.seq_length(), dims.tp)));
    }
  }
  // Context parallelism splits each sequence into 2*CP chunks (load-balanced causal attention).
  if (dims.cp > 1 && dims.cp <= kMaxContextParallel && m.seq_length() > 0 &&
      m.seq_length() % (2 * dims.cp) != 0) {
    c->Add(StrCat("model.seq_length (", m.seq_length(),
                  ") must be divisible by 2 * parallel.context_parallel_size (", 2 * dims.cp,
                  "); choose a multiple of ", 2 * dims.cp, " such as ",
                  RoundUpToMultiple(m.seq_length(), 2 * dims.cp)));
  }
}

// True when TP, PP and CP are each within their ranges, so products of them are meaningful.
bool ParallelSizesOk(const Dims& dims) {
  return dims.tp >= 1 && dims.tp <= kMaxTensorParallel && dims.pp >= 1 &&
         dims.pp <= kMaxPipelineParallel && dims.cp >= 1 && dims.cp <= kMaxContextParallel;
}

// Pipeline stages: an even split of model.num_layers, or an explicit
// parallel.pipeline_layer_split. Called only with valid sizes and layer count.
void CheckPipelineSplit(const mt::v1::ParallelSpec& p, const mt::v1::ModelSpec& m, const Dims& dims,
                        Checker* c) {
  if (p.pipeline_layer_split_size() == 0) {
    if (m.num_layers() % dims.pp != 0) {
      c->Add(StrCat("model.num_layers (", m.num_layers(),
                    ") must be divisible by parallel.pipeline_model_parallel_size (", dims.pp,
                    "); choose a multiple of ", dims.pp, " such as ",
                    RoundUpToMultiple(m.num_layers(), dims.pp),
                    ", or give parallel.pipeline_layer_split with ", dims.pp,
                    " entries summing to ", m.num_layers()));
    }
  } else {
    if (p.pipeline_layer_split_size() != dims.pp) {
      c->Add(StrCat("parallel.pipeline_layer_split has ", p.pipeline_layer_split_size(),
                    " entries; it needs one per pipeline stage "
                    "(parallel.pipeline_model_parallel_size = ",
                    dims.pp, ")"));
    }
    int64_t sum = 0;
    for (int i = 0; i < p.pipeline_layer_split_size(); ++i) {
      const int64_t n = p.pipeline_layer_split(i);
      if (n < 1) {
        c->Add(StrCat("parallel.pipeline_layer_split[", i, "] (", n,
                      ") must be >= 1: every stage needs a layer"));
      }
      sum += n;
    }
    if (sum != m.num_layers()) {
      c->Add(StrCat("parallel.pipeline_layer_split sums to ", sum,
                    "; it must sum to model.num_layers (", m.num_layers(), ")"));
    }
  }
}

// Interleaved (virtual) pipeline stages: parallel.num_layers_per_virtual_pipeline_stage.
// Called only with valid sizes.
void CheckVirtualPipeline(const mt::v1::ParallelSpec& p, const mt::v1::ModelSpec& m,
                          const Dims& dims, bool layers_ok, Checker* c) {
  const int64_t v = p.num_layers_per_virtual_pipeline_stage();
  if (v <= 0) return;
  if (dims.pp <= 1) {
    c->Add(StrCat("parallel.num_layers_per_virtual_pipeline_stage (", v,
                  ") needs parallel.pipeline_model_parallel_size > 1 (it is ", dims.pp,
                  "): the interleaved schedule splits pipeline stages into chunks; set "
                  "pipeline_model_parallel_size or leave num_layers_per_virtual_pipeline_stage "
                  "0"));
  } else if (p.pipeline_layer_split_size() > 0) {
    c->Add(
        "parallel.num_layers_per_virtual_pipeline_stage cannot be combined with "
        "parallel.pipeline_layer_split; use one of them");
  } else if (layers_ok && m.num_layers() % (dims.pp * v) != 0) {
    c->Add(StrCat("model.num_layers (", m.num_layers(),
                  ") must be divisible by parallel.pipeline_model_parallel_size (", dims.pp,
                  ") * parallel.num_layers_per_virtual_pipeline_stage (", v, ") = ", dims.pp * v,
                  " for the interleaved schedule; choose a multiple of ", dims.pp * v, " such as ",
                  RoundUpToMultiple(m.num_layers(), dims.pp * v)));
  }
}

// World size = TP * CP * PP * DP. Called only with valid sizes.
void CheckWorldSize(const mt::v1::ParallelSpec& p, const Dims& dims, Checker* c) {
  const int64_t model_parallel = dims.tp * dims.cp * dims.pp;
  const std::string dims_text = StrCat("tp(", dims.tp, ")*cp(", dims.cp, ")*pp(", dims.pp, ")");
  if (model_parallel > kMaxWorldSize) {
    c->Add(StrCat(dims_text, " = ", model_parallel, " exceeds the largest world size (",
                  kMaxWorldSize, ")"));
  } else if (p.world_size() > 0 && p.world_size() <= kMaxWorldSize) {
    if (p.data_parallel_size() > 0) {
      const int64_t world = model_parallel * p.data_parallel_size();
      if (world != p.world_size()) {
        c->Add(StrCat("parallel.world_size (", p.world_size(), ") != ", dims_text, "*dp(",
                      p.data_parallel_size(), ") = ", world, "; set world_size to ", world,
                      ", or data_parallel_size to auto (0)"));
      }
    } else if (p.world_size() % model_parallel != 0) {
      c->Add(StrCat("parallel.world_size (", p.world_size(), ") must be a multiple of ", dims_text,
                    " = ", model_parallel, " (the data-parallel size is world_size / ",
                    model_parallel, "); choose e.g. ",
                    RoundUpToMultiple(p.world_size(), model_parallel)));
    }
  } else if (p.data_parallel_size() > 0 &&
             model_parallel * p.data_parallel_size() > kMaxWorldSize) {
    c->Add(StrCat(dims_text, "*dp(", p.data_parallel_size(),
                  ") = ", model_parallel * p.data_parallel_size(),
                  " exceeds the largest world size (", kMaxWorldSize, ")"));
  }
}

// Features that need another feature on: sequence parallelism, TP comm overlap, parameter
// gather overlap.
void CheckParallelFeatures(const mt::v1::ParallelSpec& p, const Dims& dims, Checker* c) {
  if (p.sequence_parallel() && dims.tp == 1) {
    c->Add(
        "parallel.sequence_parallel needs parallel.tensor_model_parallel_size > 1 (it is 1): "
        "sequence parallelism shards the tensor-parallel regions; set "
        "tensor_model_parallel_size (--tensor-model-parallel-size) to 2 or more, or turn "
        "sequence_parallel off (Megatron-LM turns it off silently at TP=1; mt asks)");
  }
  if (p.tp_comm_overlap() && !p.sequence_parallel()) {
    c->Add(
        "parallel.tp_comm_overlap needs parallel.sequence_parallel (--sequence-parallel): the "
        "overlap splits the sequence-parallel all-gathers and reduce-scatters; turn "
        "sequence_parallel on or tp_comm_overlap off");
  }
  if (p.overlap_param_gather() && !p.use_distributed_optimizer()) {
    c->Add(
        "parallel.overlap_param_gather needs parallel.use_distributed_optimizer "
        "(--use-distributed-optimizer): only the distributed optimizer gathers parameters; turn "
        "use_distributed_optimizer on or overlap_param_gather off");
  }
  if (p.overlap_param_gather() && !p.overlap_grad_reduce()) {
    c->Add(
        "parallel.overlap_param_gather needs parallel.overlap_grad_reduce "
        "(--overlap-grad-reduce); turn overlap_grad_reduce on or overlap_param_gather off");
  }
}

void CheckParallel(const mt::v1::JobSpec& s, const Dims& dims, Checker* c) {
  const mt::v1::ParallelSpec& p = s.parallel();
  const mt::v1::ModelSpec& m = s.model();
  c->Range("parallel.tensor_model_parallel_size", dims.tp, 1, kMaxTensorParallel);
  c->Range("parallel.pipeline_model_parallel_size", dims.pp, 1, kMaxPipelineParallel);
  c->Range("parallel.context_parallel_size", dims.cp, 1, kMaxContextParallel);
  c->Range("parallel.data_parallel_size", p.data_parallel_size(), 0, kMaxWorldSize);
  c->Range("parallel.world_size", p.world_size(), 0, kMaxWorldSize);
  c->NonNegative("parallel.ddp_bucket_size", p.ddp_bucket_size(), "40000000");
  c->NonNegative("parallel.num_layers_per_virtual_pipeline_stage",
                 p.num_layers_per_virtual_pipeline_stage(), "no interleaving");
  const bool layers_ok = m.num_layers() >= 1 && m.num_layers() <= kMaxLayers;
  if (ParallelSizesOk(dims)) {
    if (layers_ok) CheckPipelineSplit(p, m, dims, c);
    CheckVirtualPipeline(p, m, dims, layers_ok, c);
    CheckWorldSize(p, dims, c);
  }
  CheckParallelFeatures(p, dims, c);
}

// training.micro_batch_size and global_batch_size, against the data-parallel size and, with the
// interleaved schedule, the pipeline size.
void CheckBatchSizes(const mt::v1::JobSpec& s, const Dims& dims, Checker* c) {
  const mt::v1::TrainingSpec& t = s.training();
  c->Required("training.micro_batch_size", t.micro_batch_size(), 1, kMaxMicroBatch,
              "the samples per rank per forward pass");
  c->Range("training.global_batch_size", t.global_batch_size(), 0, kMaxGlobalBatch);
  const bool micro_ok = t.micro_batch_size() >= 1 && t.micro_batch_size() <= kMaxMicroBatch;
  const bool global_ok = t.global_batch_size() >= 1 && t.global_batch_size() <= kMaxGlobalBatch;
  if (!micro_ok || !global_ok) return;
  if (!(dims.dp > 0 && dims.dp <= kMaxWorldSize)) {
    if (t.global_batch_size() % t.micro_batch_size() != 0) {
      c->Add(StrCat("training.global_batch_size (", t.global_batch_size(),
                    ") must be divisible by training.micro_batch_size (", t.micro_batch_size(),
                    "); choose a multiple of ", t.micro_batch_size(), " such as ",
                    RoundUpToMultiple(t.global_batch_size(), t.micro_batch_size())));
    }
    return;
  }
  const int64_t step = t.micro_batch_size() * dims.dp;
  const std::string dp_text =
      dims.dp_explicit
          ? StrCat("parallel.data_parallel_size (", dims.dp, ")")
          : StrCat("the data-parallel size (", dims.dp, " = parallel.world_size / (tp*cp*pp))");
  if (t.global_batch_size() % step != 0) {
    c->Add(StrCat("training.global_batch_size (", t.global_batch_size(),
                  ") must be divisible by training.micro_batch_size (", t.micro_batch_size(),
                  ") * ", dp_text, " = ", step, "; choose a multiple of ", step, " such as ",
                  RoundUpToMultiple(t.global_batch_size(), step)));
    return;
  }
  if (s.parallel().num_layers_per_virtual_pipeline_stage() > 0 && dims.pp > 1) {
    const int64_t microbatches = t.global_batch_size() / step;
    if (microbatches % dims.pp != 0) {
      c->Add(
          StrCat("the interleaved schedule needs the number of micro-batches "
                 "(training.global_batch_size / (micro_batch_size * data-parallel size) "
                 "= ",
                 microbatches, ") to be divisible by parallel.pipeline_model_parallel_size (",
                 dims.pp, "); choose global_batch_size such as ",
                 RoundUpToMultiple(t.global_batch_size(), step * dims.pp)));
    }
  }
}

// Exactly one of training.train_iters and train_samples.
void CheckTrainingLength(const mt::v1::TrainingSpec& t, Checker* c) {
  c->NonNegative("training.train_iters", t.train_iters());
  c->NonNegative("training.train_samples", t.train_samples());
  if (t.train_iters() > kMaxTrainLength) {
    c->Add(StrCat("training.train_iters (", t.train_iters(), ") is more than ", kMaxTrainLength,
                  " steps; set a real length (stop a run early with mtctl cancel)"));
  }
  if (t.train_samples() > kMaxTrainLength) {
    c->Add(StrCat("training.train_samples (", t.train_samples(), ") is more than ", kMaxTrainLength,
                  " samples; set a real length"));
  }
  const bool by_iters = t.train_iters() > 0;
  const bool by_samples = t.train_samples() > 0;
  if (!by_iters && !by_samples && t.train_iters() == 0 && t.train_samples() == 0) {
    c->Add(StrCat("set exactly one of ", WithFlag("training.train_iters"), " and ",
                  WithFlag("training.train_samples"), ": neither is set"));
  } else if (by_iters && by_samples) {
    c->Add(StrCat("training.train_iters (", t.train_iters(), ") and training.train_samples (",
                  t.train_samples(), ") are exclusive; set exactly one"));
  }
}

// The peak and the minimum learning rate.
void CheckLearningRate(const mt::v1::TrainingSpec& t, Checker* c) {
  if (t.lr() == 0) {
    c->Add(StrCat(WithFlag("training.lr"),
                  " is required: set the peak learning rate, > 0 and <= ", FormatDouble(kMaxLr)));
  } else if (!(t.lr() > 0 && t.lr() <= kMaxLr)) {
    c->Add(StrCat("training.lr (", FormatDouble(t.lr()),
                  ") is out of range: it must be > 0 and <= ", FormatDouble(kMaxLr)));
  }
  if (!(t.min_lr() >= 0)) {
    c->Add(StrCat("training.min_lr (", FormatDouble(t.min_lr()), ") must be >= 0"));
  } else if (t.lr() > 0 && t.min_lr() > t.lr()) {
    c->Add(StrCat("training.min_lr (", FormatDouble(t.min_lr()), ") must be <= training.lr (",
                  FormatDouble(t.lr()), ")"));
  }
}

// A schedule field of the other kind of training than the one chosen, and its counterpart.
struct OtherKindField {
  const char* field;
  int64_t value;
  const char* instead;
};

// Megatron keeps iteration- and sample-based schedules apart: with `own` (train_iters or
// train_samples) set, the `fields` of the `other` kind must stay 0.
void RejectOtherKind(std::initializer_list<OtherKindField> fields, absl::string_view kind,
                     absl::string_view other, absl::string_view own, Checker* c) {
  for (const OtherKindField& x : fields) {
    if (x.value != 0) {
      c->Add(StrCat("training.", x.field, " (", x.value, ") is for ", kind, " training (training.",
                    other, "); with training.", own, " use training.", x.instead));
    }
  }
}

// Megatron requires the warm-up to end before the decay does; `unit` is "iters" or "samples".
void CheckWarmupBeforeDecay(absl::string_view unit, absl::string_view noun, int64_t warmup,
                            int64_t decay_field, int64_t train, Checker* c) {
  if (warmup <= 0) return;
  const int64_t decay = decay_field > 0 ? decay_field : train;
  if (warmup >= decay) {
    c->Add(StrCat("training.lr_warmup_", unit, " (", warmup, ") must be less than the decay ", noun,
                  " (training.lr_decay_", unit, ", default train_", unit, ": ", decay, ")"));
  }
}

// Warm-up and decay of the learning rate, in iterations or in samples.
void CheckLrSchedule(const mt::v1::TrainingSpec& t, Checker* c) {
  c->NonNegative("training.lr_decay_iters", t.lr_decay_iters(), "train_iters");
  c->NonNegative("training.lr_decay_samples", t.lr_decay_samples(), "train_samples");
  c->NonNegative("training.lr_warmup_iters", t.lr_warmup_iters());
  c->NonNegative("training.lr_warmup_samples", t.lr_warmup_samples());
  const bool by_iters = t.train_iters() > 0;
  const bool by_samples = t.train_samples() > 0;
  if (by_iters && !by_samples) {
    RejectOtherKind(
        {{"lr_decay_samples", t.lr_decay_samples(), "lr_decay_iters"},
         {"lr_warmup_samples", t.lr_warmup_samples(), "lr_warmup_iters or lr_warmup_fraction"}},
        "sample-based", "train_samples", "train_iters", c);
  }
  if (by_samples && !by_iters) {
    RejectOtherKind(
        {{"lr_decay_iters", t.lr_decay_iters(), "lr_decay_samples"},
         {"lr_warmup_iters", t.lr_warmup_iters(), "lr_warmup_samples or lr_warmup_fraction"}},
        "iteration-based", "train_iters", "train_samples", c);
  }
  if (t.has_lr_warmup_fraction()) {
    // Megatron requires warmup steps < decay steps, so a fraction of 1 is refused too.
    c->UnitOpen("training.lr_warmup_fraction", t.lr_warmup_fraction());
    if (t.lr_warmup_iters() > 0 || t.lr_warmup_samples() > 0) {
      c->Add(
          "training.lr_warmup_fraction is exclusive with training.lr_warmup_iters and "
          "training.lr_warmup_samples; set one of them");
    }
  }
  if (by_iters && !by_samples) {
    CheckWarmupBeforeDecay("iters", "steps", t.lr_warmup_iters(), t.lr_decay_iters(),
                           t.train_iters(), c);
  }
  if (by_samples && !by_iters) {
    CheckWarmupBeforeDecay("samples", "samples", t.lr_warmup_samples(), t.lr_decay_samples(),
                           t.train_samples(), c);
  }
}

void CheckOptimizer(const mt::v1::TrainingSpec& t, Checker* c) {
  if (t.has_weight_decay()) c->NonNegativeNumber("training.weight_decay", t.weight_decay());
  if (t.has_adam_beta1()) c->UnitOpen("training.adam_beta1", t.adam_beta1());
  if (t.has_adam_beta2()) c->UnitOpen("training.adam_beta2", t.adam_beta2());
  if (t.has_adam_eps()) c->Positive("training.adam_eps", t.adam_eps());
  if (t.has_sgd_momentum()) c->UnitOpen("training.sgd_momentum", t.sgd_momentum());
  if (t.has_clip_grad()) c->NonNegativeNumber("training.clip_grad", t.clip_grad());
}

// Precision and loss scaling.
void CheckLossScaling(const mt::v1::TrainingSpec& t, Checker* c) {
  if (t.has_loss_scale()) {
    if (t.precision() != mt::v1::PRECISION_FP16) {
      const auto* v = mt::v1::Precision_descriptor()->FindValueByNumber(t.precision());
      const std::string precision = (v == nullptr || t.precision() == mt::v1::PRECISION_UNSPECIFIED)
                                        ? "fp32"
                                        : internal::EnumShortName(v);
      c->Add(StrCat("training.loss_scale is set but training.precision is ", precision,
                    ": loss scaling only applies to fp16; remove loss_scale or set precision: "
                    "fp16 (--fp16)"));
    }
    c->Positive("training.loss_scale", t.loss_scale());
  }
  if (t.has_initial_loss_scale()) {
    c->Positive("training.initial_loss_scale", t.initial_loss_scale());
  }
  if (t.has_min_loss_scale()) c->Positive("training.min_loss_scale", t.min_loss_scale());
  if (t.has_initial_loss_scale() && t.has_min_loss_scale() &&
      t.min_loss_scale() > t.initial_loss_scale()) {
    c->Add(StrCat("training.min_loss_scale (", FormatDouble(t.min_loss_scale()),
                  ") must be <= training.initial_loss_scale (",
                  FormatDouble(t.initial_loss_scale()), ")"));
  }
  if (t.has_loss_scale_window() && t.loss_scale_window() < 1) {
    c->Add(StrCat("training.loss_scale_window (", t.loss_scale_window(), ") must be >= 1"));
  }
  if (t.has_hysteresis() && t.hysteresis() < 1) {
    c->Add(StrCat("training.hysteresis (", t.hysteresis(), ") must be >= 1"));
  }
}

// Activation recomputation.
void CheckRecompute(const mt::v1::JobSpec& s, const Dims& dims, Checker* c) {
  const mt::v1::TrainingSpec& t = s.training();
  c->NonNegative("training.recompute_num_layers", t.recompute_num_layers(), "1");
  if (t.recompute_granularity() == mt::v1::RECOMPUTE_GRANULARITY_FULL &&
      t.recompute_num_layers() > 0 && dims.pp >= 1 && s.model().num_layers() > 0) {
    int64_t per_stage = s.model().num_layers() / dims.pp;
    for (int32_t n : s.parallel().pipeline_layer_split()) {
      per_stage = std::max<int64_t>(per_stage, n);
    }
    if (per_stage > 0 && t.recompute_num_layers() > per_stage) {
      c->Add(StrCat("training.recompute_num_layers (", t.recompute_num_layers(),
                    ") must be <= the layers per pipeline stage (", per_stage, ")"));
    }
  }
  if (t.recompute_method() == mt::v1::RECOMPUTE_METHOD_BLOCK &&
      t.recompute_granularity() != mt::v1::RECOMPUTE_GRANULARITY_FULL) {
    c->Add(
        "training.recompute_method block only applies to recompute_granularity full; set "
        "recompute_granularity: full (--recompute-granularity full) or remove "
        "recompute_method");
  }
}

void CheckTraining(const mt::v1::JobSpec& s, const Dims& dims, Checker* c) {
  CheckBatchSizes(s, dims, c);
  CheckTrainingLength(s.training(), c);
  CheckLearningRate(s.training(), c);
  CheckLrSchedule(s.training(), c);
  CheckOptimizer(s.training(), c);
  CheckLossScaling(s.training(), c);
  CheckRecompute(s, dims, c);
}

void CheckDataPaths(const google::protobuf::RepeatedPtrField<mt::v1::DataPath>& paths,
                    absl::string_view field, Checker* c) {
  if (paths.size() > kMaxDataPaths) {
    c->Add(StrCat("data.", field, " has ", paths.size(), " entries, over the limit of ",
                  kMaxDataPaths));
  }
  for (int i = 0; i < paths.size(); ++i) {
    const mt::v1::DataPath& d = paths.Get(i);
    const std::string at = StrCat("data.", field, "[", i, "]");
    // A single path's weight defaults to 1.
    if (!(paths.size() == 1 && d.weight() == 0)) c->Positive(StrCat(at, ".weight"), d.weight());
    if (d.prefix().empty()) {
      c->Add(StrCat(at,
                    ".prefix is empty: give the dataset prefix (the path of "
                    "<prefix>.bin and <prefix>.idx without the suffix)"));
    }
  }
}

void CheckData(const mt::v1::JobSpec& s, Checker* c) {
  const mt::v1::DataSpec& d = s.data();
  const bool blended = d.data_path_size() > 0;
  const bool separate = d.train_data_path_size() > 0;
  if (!blended && !separate) {
    c->Add(StrCat(WithFlag("data.data_path"),
                  " is empty: give at least one dataset prefix (the path of <prefix>.bin and "
                  "<prefix>.idx without the suffix), or ",
                  WithFlag("data.train_data_path"), " for separate train/valid/test datasets"));
  }
  if (blended && separate) {
    c->Add(
        "data.data_path and data.train_data_path are exclusive: use data_path with data.split, "
        "or train_data_path with valid_data_path/test_data_path");
  }
  if (blended && (d.valid_data_path_size() > 0 || d.test_data_path_size() > 0)) {
    c->Add(
        "data.valid_data_path and data.test_data_path go with data.train_data_path, not with "
        "data.data_path (which data.split divides)");
  }
  CheckDataPaths(d.data_path(), "data_path", c);
  CheckDataPaths(d.train_data_path(), "train_data_path", c);
  CheckDataPaths(d.valid_data_path(), "valid_data_path", c);
  CheckDataPaths(d.test_data_path(), "test_data_path", c);
  if (!d.split().empty()) {
    if (auto split = internal::ParseSplit(d.split()); !split.ok()) {
      c->Add(StrCat("data.split: ", split.status().message()));
    }
  }
  const mt::v1::TokenizerType type = d.tokenizer().type();
  if (type == mt::v1::TOKENIZER_TYPE_GPT2_BPE || type == mt::v1::TOKENIZER_TYPE_UNSPECIFIED) {
    if (d.tokenizer().vocab_file().empty()) {
      c->Add(StrCat(WithFlag("data.tokenizer.vocab_file"),
                    " is required for the GPT-2 BPE tokenizer: give the path of "
                    "gpt2-vocab.json"));
    }
    if (d.tokenizer().merge_file().empty()) {
      c->Add(StrCat(WithFlag("data.tokenizer.merge_file"),
                    " is required for the GPT-2 BPE tokenizer: give the path of "
                    "gpt2-merges.txt"));
    }
  }
  if (d.has_num_workers()) c->Range("data.num_workers", d.num_workers(), 0, kMaxNumWorkers);
}

void CheckCheckpoint(const mt::v1::JobSpec& s, Checker* c) {
  const mt::v1::CheckpointSpec& k = s.checkpoint();
  c->NonNegative("checkpoint.save_interval", k.save_interval(), "only at the end and on cancel");
  if (k.finetune() && k.load_dir().empty() && s.from_checkpoint().empty()) {
    c->Add(
        "checkpoint.finetune needs a checkpoint to start from: set checkpoint.load_dir "
        "(--load) or from_checkpoint");
  }
  c->NonNegative("checkpoint.retention.keep_last", k.retention().keep_last(), "keep all");
  c->NonNegative("checkpoint.retention.keep_best", k.retention().keep_best(), "none");
  c->NonNegative("checkpoint.retention.keep_every_steps", k.retention().keep_every_steps(), "none");
  if (k.retention().keep_best() > 0 && s.evaluation().has_eval_interval() &&
      s.evaluation().eval_interval() == 0) {
    c->Add(StrCat("checkpoint.retention.keep_best (", k.retention().keep_best(),
                  ") ranks checkpoints by validation loss, but evaluation.eval_interval is 0 "
                  "(never); set eval_interval or keep_best: 0"));
  }
}

// restart.hang_* / save_load / distributed timeout / straggler_* (hang_detector.h). Each
// field is checked when given; the relations use the defaults for fields left unset.
void CheckHangDetection(const mt::v1::RestartPolicy& r, Checker* c) {
  const int64_t floor = r.has_hang_timeout_floor_seconds() ? r.hang_timeout_floor_seconds()
                                                           : kDefaultHangTimeoutFloorSeconds;
  if (r.has_hang_timeout_floor_seconds()) {
    c->Range("restart.hang_timeout_floor_seconds", floor, 1, kMaxTimeoutSeconds);
  }
  if (r.has_hang_step_multiplier() &&
      !(r.hang_step_multiplier() >= 1 && r.hang_step_multiplier() <= 1000)) {
    c->Add(StrCat("restart.hang_step_multiplier (", FormatDouble(r.hang_step_multiplier()),
                  ") must be in [1, 1000]"));
  }
  if (r.has_save_load_timeout_seconds()) {
    c->Range("restart.save_load_timeout_seconds", r.save_load_timeout_seconds(),
             std::max<int64_t>(1, floor), kMaxTimeoutSeconds);
  }
  const int64_t minutes = r.has_distributed_timeout_minutes() ? r.distributed_timeout_minutes()
                                                              : kDefaultDistributedTimeoutMinutes;
  if (r.has_distributed_timeout_minutes()) {
    c->Range("restart.distributed_timeout_minutes (--distributed-timeout-minutes)", minutes, 1,
             kMaxTimeoutSeconds / 60);
  }
  if (minutes >= 1 && minutes * 60 <= floor) {
    c->Add(StrCat("restart.distributed_timeout_minutes (", minutes,
                  ") must be longer than restart.hang_timeout_floor_seconds (", floor,
                  " s): a healthy rank's collective would time out before the stuck rank is "
                  "found; raise the timeout or lower the floor"));
  }
  if (r.has_straggler_threshold() &&
      !(r.straggler_threshold() >= 1.05 && r.straggler_threshold() <= 100)) {
    c->Add(StrCat("restart.straggler_threshold (", FormatDouble(r.straggler_threshold()),
                  ") must be in [1.05, 100] (a multiple of the job's median step time)"));
  }
  if (r.has_straggler_window_steps()) {
    c->Range("restart.straggler_window_steps", r.straggler_window_steps(), 1, 100000);
  }
}

void CheckRest(const mt::v1::JobSpec& s, Checker* c) {
  const mt::v1::EvaluationSpec& e = s.evaluation();
  if (e.has_eval_interval()) c->NonNegative("evaluation.eval_interval", e.eval_interval(), "never");
  if (e.has_eval_iters()) c->NonNegative("evaluation.eval_iters", e.eval_iters());
  if (s.logging().has_log_interval() && s.logging().log_interval() < 1) {
    c->Add(StrCat("logging.log_interval (", s.logging().log_interval(), ") must be >= 1"));
  }
  if (s.restart().has_max_restarts()) {
    c->Range("restart.max_restarts", s.restart().max_restarts(), 0, kMaxRestarts);
  }
  CheckHangDetection(s.restart(), c);
  for (int i = 0; i < s.resources().nodes_size(); ++i) {
    const std::string& node = s.resources().nodes(i);
    if (internal::FindShellMetacharacters(node).empty() && !MatchesName(node, kMaxNodeNameLength)) {
      c->Add(StrCat("resources.nodes[", i, "] (", Quote(node), ") must be a node name: 1..",
                    kMaxNodeNameLength, " characters of [A-Za-z0-9._-]"));
    }
  }
}

// Checks that apply to every field of every message, found by reflection so that new fields
// are covered: enum values must be known; strings must be UTF-8, hold no shell syntax, and be
// at most 4096 bytes without NUL (paths through ValidatePath).
void CheckAllFields(const Message& message, const std::string& prefix, Checker* c) {
  const Reflection* r = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(message, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string name = prefix.empty() ? f->name() : StrCat(prefix, ".", f->name());
    const int count = f->is_repeated() ? r->FieldSize(message, f) : 1;
    for (int i = 0; i < count; ++i) {
      const std::string at = f->is_repeated() ? StrCat(name, "[", i, "]") : name;
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_MESSAGE:
          CheckAllFields(
              f->is_repeated() ? r->GetRepeatedMessage(message, f, i) : r->GetMessage(message, f),
              at, c);
          break;
        case FieldDescriptor::CPPTYPE_ENUM: {
          const int number = f->is_repeated() ? r->GetRepeatedEnumValue(message, f, i)
                                              : r->GetEnumValue(message, f);
          if (f->enum_type()->FindValueByNumber(number) == nullptr) {
            std::vector<std::string> names;
            for (int k = 0; k < f->enum_type()->value_count(); ++k) {
              if (f->enum_type()->value(k)->number() != 0) {
                names.push_back(internal::EnumShortName(f->enum_type()->value(k)));
              }
            }
            c->Add(StrCat(at, " (", number, ") is not a known value; expected one of ",
                          absl::StrJoin(names, ", ")));
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_STRING: {
          const std::string value =
              f->is_repeated() ? r->GetRepeatedString(message, f, i) : r->GetString(message, f);
          if (value.empty()) break;
          if (PathFields().count(f->full_name()) > 0) {
            c->Path(value, at);
          } else if (value.find('\0') != std::string::npos) {
            c->Add(StrCat(at, " contains a NUL byte"));
          } else if (value.size() > kMaxStringBytes && !IsFreeText(f)) {
            c->Add(StrCat(at, " is ", value.size(), " bytes, over the limit of ", kMaxStringBytes));
          }
          if (!internal::IsValidUtf8(value)) {
            c->Add(IsFreeText(f) ? StrCat(at, " is not valid UTF-8")
                                 : StrCat(at, " (", Quote(value), ") is not valid UTF-8"));
          }
          if (IsFreeText(f)) break;
          if (const std::string meta = internal::FindShellMetacharacters(value); !meta.empty()) {
            c->Add(StrCat(at, " (", Quote(value), ") contains the shell metacharacter ",
                          Quote(meta),
                          "; mt never runs a shell and a spec holds no shell syntax: remove it"));
          }
          break;
        }
        default:
          break;
      }
    }
  }
}

// "/a/./b//c/../d" -> "/a/b/d": "." components and repeated slashes dropped, ".." removing the
// component before it (lexically, as Python's os.path.normpath; ".." at the root stays at the
// root).
std::string NormalizeAbsolute(absl::string_view path) {
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  return StrCat("/", absl::StrJoin(parts, "/"));
}

absl::Status Resolve(std::string* path, absl::string_view base_dir, absl::string_view field) {
  if (path->empty()) return absl::OkStatus();
  if ((*path)[0] == '/') {
    *path = NormalizeAbsolute(*path);
    return absl::OkStatus();
  }
  if ((*path)[0] == '~') {
    return absl::InvalidArgumentError(
        StrCat(field, " (", Quote(*path),
               ") starts with '~', which mt does not expand; give an absolute path"));
  }
  *path = NormalizeAbsolute(StrCat(base_dir, "/", *path));
  return absl::OkStatus();
}

// Calls `fn(field path, value)` for every non-empty path field (PathFields) of `message`.
template <typename Fn>
void ForEachPathField(const Message& message, const std::string& prefix, const Fn& fn) {
  const Reflection* r = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(message, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string name = prefix.empty() ? f->name() : StrCat(prefix, ".", f->name());
    const int count = f->is_repeated() ? r->FieldSize(message, f) : 1;
    for (int i = 0; i < count; ++i) {
      const std::string at = f->is_repeated() ? StrCat(name, "[", i, "]") : name;
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        ForEachPathField(
            f->is_repeated() ? r->GetRepeatedMessage(message, f, i) : r->GetMessage(message, f), at,
            fn);
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
                 PathFields().count(f->full_name()) > 0) {
        const std::string value =
            f->is_repeated() ? r->GetRepeatedString(message, f, i) : r->GetString(message, f);
        if (!value.empty()) fn(at, value);
      }
    }
  }
}

}  // namespace

std::vector<std::string> ListSubmittedPathProblems(const mt::v1::JobSpec& spec) {
  std::vector<std::string> problems;
  ForEachPathField(spec, "", [&](const std::string& at, const std::string& value) {
    if (absl::Status s = ValidatePath(value, at); !s.ok()) {
      problems.push_back(std::string(s.message()));
    } else if (value[0] != '/') {
      problems.push_back(StrCat(at, " (", Quote(value),
                                ") must be an absolute path: the coordinator and workers run in "
                                "another directory (mtctl makes job-file paths absolute)"));
    } else if (NormalizeAbsolute(value) != value) {
      problems.push_back(StrCat(at, " (", Quote(value),
                                ") must be a normalized path without "
                                "'.', '..' or repeated slashes: give ",
                                Quote(NormalizeAbsolute(value))));
    }
  });
  return problems;
}

absl::Status ValidateSubmittedPaths(const mt::v1::JobSpec& spec) {
  const std::vector<std::string> problems = ListSubmittedPathProblems(spec);
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
}

absl::Status CheckPathsConfined(const mt::v1::JobSpec& spec, const AllowedRoots& roots) {
  if (!roots.enabled()) return absl::OkStatus();
  std::vector<std::string> problems;
  absl::StatusCode code = absl::StatusCode::kPermissionDenied;
  ForEachPathField(spec, "", [&](const std::string& at, const std::string& value) {
    // A data prefix names two files, either of which may be a link of its own.
    std::vector<std::string> paths = {value};
    if (absl::EndsWith(at, ".prefix")) {
      paths.push_back(value + ".bin");
      paths.push_back(value + ".idx");
    }
    for (const std::string& p : paths) {
      if (absl::Status s = roots.Check(p, at); !s.ok()) {
        if (s.code() != absl::StatusCode::kPermissionDenied) code = s.code();
        problems.push_back(std::string(s.message()));
        break;
      }
    }
  });
  if (problems.empty()) return absl::OkStatus();
  return absl::Status(code, absl::StrJoin(problems, "\n"));
}

std::vector<std::string> ListSpecProblems(const mt::v1::JobSpec& spec) {
  Checker c;
  const Dims dims = EffectiveDims(spec.parallel());
  CheckJob(spec, &c);
  CheckModel(spec, dims, &c);
  CheckParallel(spec, dims, &c);
  CheckTraining(spec, dims, &c);
  CheckData(spec, &c);
  CheckCheckpoint(spec, &c);
  CheckRest(spec, &c);
  CheckAllFields(spec, "", &c);
  for (std::string& problem : ListInferenceProblems(spec)) c.Add(std::move(problem));
  return c.Take();
}

absl::Status ValidateSpec(const mt::v1::JobSpec& spec) {
  const std::vector<std::string> problems = ListSpecProblems(spec);
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
}

absl::Status ResolveRelativePaths(mt::v1::JobSpec* spec, absl::string_view base_dir) {
  if (absl::Status s = ValidatePath(base_dir, "base directory"); !s.ok()) return s;
  if (base_dir[0] != '/') {
    return absl::InvalidArgumentError(
        StrCat("base directory ", Quote(base_dir), " must be an absolute path"));
  }
  // Sub-messages are only touched when they hold a path, so presence is unchanged.
  const auto present = [](const std::string& p) { return !p.empty(); };
  if (spec->has_data()) {
    mt::v1::DataSpec* d = spec->mutable_data();
    for (auto [paths, field] : {std::pair{d->mutable_data_path(), "data_path"},
                                std::pair{d->mutable_train_data_path(), "train_data_path"},
                                std::pair{d->mutable_valid_data_path(), "valid_data_path"},
                                std::pair{d->mutable_test_data_path(), "test_data_path"}}) {
      for (int i = 0; i < paths->size(); ++i) {
        MT_RETURN_IF_ERROR(Resolve(paths->Mutable(i)->mutable_prefix(), base_dir,
                                   StrCat("data.", field, "[", i, "].prefix")));
      }
    }
    if (present(d->data_cache_path())) {
      MT_RETURN_IF_ERROR(Resolve(d->mutable_data_cache_path(), base_dir, "data.data_cache_path"));
    }
    if (present(d->tokenizer().vocab_file())) {
      MT_RETURN_IF_ERROR(Resolve(d->mutable_tokenizer()->mutable_vocab_file(), base_dir,
                                 "data.tokenizer.vocab_file"));
    }
    if (present(d->tokenizer().merge_file())) {
      MT_RETURN_IF_ERROR(Resolve(d->mutable_tokenizer()->mutable_merge_file(), base_dir,
                                 "data.tokenizer.merge_file"));
    }
  }
  if (present(spec->checkpoint().save_dir())) {
    MT_RETURN_IF_ERROR(
        Resolve(spec->mutable_checkpoint()->mutable_save_dir(), base_dir, "checkpoint.save_dir"));
  }
  if (present(spec->checkpoint().load_dir())) {
    MT_RETURN_IF_ERROR(
        Resolve(spec->mutable_checkpoint()->mutable_load_dir(), base_dir, "checkpoint.load_dir"));
  }
  if (present(spec->logging().tensorboard_dir())) {
    MT_RETURN_IF_ERROR(Resolve(spec->mutable_logging()->mutable_tensorboard_dir(), base_dir,
                               "logging.tensorboard_dir"));
  }
  return absl::OkStatus();
}

}  // namespace mt::spec
