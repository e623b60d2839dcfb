#include "common/spec/megatron_flags.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/base/status_macros.h"
#include "common/spec/spec_internal.h"

namespace mt::spec {
namespace {

using absl::StrCat;
using internal::Quote;

enum class Kind {
  kValue,          // --flag VALUE: sets `field`, parsed by the field's type
  kTrue,           // --flag: sets the bool `field`
  kChoice,         // --flag VALUE: Megatron's spelling -> enum short name of `field`
  kDataPaths,      // --flag PREFIX | W1 P1 W2 P2 ...: the DataPath list `field`
  kSplit,          // --split 969,30,1 (or 969/30/1)
  kPrecision,      // --fp16 / --bf16: `choices[0].second` is the precision
  kRecompute,      // --checkpoint-activations / --recompute-activations: granularity
  kNoEffect,       // --flag: accepted with a warning
  kNoEffectValue,  // --flag VALUE: accepted with a warning; `choices` (if any) restrict VALUE,
                   // "<int>" accepts an integer
  kUnsupported,    // a real Megatron flag mt refuses; `note` says why
  kUnsupportedValue,
};

struct FlagSpec {
  std::string flag;
  Kind kind;
  std::string field;  // dotted JobSpec path, for the kinds that set one
  // kChoice: Megatron value -> enum short name. kNoEffectValue: allowed values (first = text).
  std::vector<std::pair<std::string, std::string>> choices;
  std::string note;  // why a flag has no effect or is refused
};

bool TakesValue(Kind kind) {
  return kind == Kind::kValue || kind == Kind::kChoice || kind == Kind::kSplit ||
         kind == Kind::kNoEffectValue || kind == Kind::kUnsupportedValue;
}

const std::vector<FlagSpec>& Flags() {
  static const auto* flags = [] {
    const std::string kArch =
        "mt trains the GPT-2 architecture (learned absolute positions, LayerNorm, GELU MLP, "
        "multi-head attention with biases)";
    const std::string kRanks = "the coordinator places ranks";
    const std::string kAlways = "mt always does this";
    const std::string kLogging = "mt always measures and reports it";
    auto* f = new std::vector<FlagSpec>{
        // model
        {"--num-layers", Kind::kValue, "model.num_layers", {}, ""},
        {"--hidden-size", Kind::kValue, "model.hidden_size", {}, ""},
        {"--num-attention-heads", Kind::kValue, "model.num_attention_heads", {}, ""},
        {"--ffn-hidden-size", Kind::kValue, "model.ffn_hidden_size", {}, ""},
        {"--kv-channels", Kind::kValue, "model.kv_channels", {}, ""},
        {"--seq-length", Kind::kValue, "model.seq_length", {}, ""},
        {"--max-position-embeddings", Kind::kValue, "model.max_position_embeddings", {}, ""},
        {"--vocab-size", Kind::kValue, "model.vocab_size", {}, ""},
        {"--make-vocab-size-divisible-by",
         Kind::kValue,
         "model.make_vocab_size_divisible_by",
         {},
         ""},
        {"--hidden-dropout", Kind::kValue, "model.hidden_dropout", {}, ""},
        {"--attention-dropout", Kind::kValue, "model.attention_dropout", {}, ""},
        {"--init-method-std", Kind::kValue, "model.init_method_std", {}, ""},
        {"--untie-embeddings-and-output-weights",
         Kind::kTrue,
         "model.untie_embeddings_and_output_weights",
         {},
         ""},
        {"--layernorm-epsilon", Kind::kValue, "model.layernorm_epsilon", {}, ""},
        // parallel
        {"--tensor-model-parallel-size",
         Kind::kValue,
         "parallel.tensor_model_parallel_size",
         {},
         ""},
        {"--pipeline-model-parallel-size",
         Kind::kValue,
         "parallel.pipeline_model_parallel_size",
         {},
         ""},
        {"--context-parallel-size", Kind::kValue, "parallel.context_parallel_size", {}, ""},
        {"--num-layers-per-virtual-pipeline-stage",
         Kind::kValue,
         "parallel.num_layers_per_virtual_pipeline_stage",
         {},
         ""},
        {"--sequence-parallel", Kind::kTrue, "parallel.sequence_parallel", {}, ""},
        {"--use-distributed-optimizer", Kind::kTrue, "parallel.use_distributed_optimizer", {}, ""},
        {"--overlap-grad-reduce", Kind::kTrue, "parallel.overlap_grad_reduce", {}, ""},
        {"--overlap-param-gather", Kind::kTrue, "parallel.overlap_param_gather", {}, ""},
        {"--overlap-p2p-comm", Kind::kTrue, "parallel.overlap_p2p_comm", {}, ""},
        {"--tp-comm-overlap", Kind::kTrue, "parallel.tp_comm_overlap", {}, ""},
        {"--ddp-bucket-size", Kind::kValue, "parallel.ddp_bucket_size", {}, ""},
        // training
        {"--micro-batch-size", Kind::kValue, "training.micro_batch_size", {}, ""},
        {"--global-batch-size", Kind::kValue, "training.global_batch_size", {}, ""},
        {"--train-iters", Kind::kValue, "training.train_iters", {}, ""},
        {"--train-samples", Kind::kValue, "training.train_samples", {}, ""},
        {"--lr", Kind::kValue, "training.lr", {}, ""},
        {"--min-lr", Kind::kValue, "training.min_lr", {}, ""},
        {"--lr-decay-style",
         Kind::kChoice,
         "training.lr_decay_style",
         {{"constant", "constant"},
          {"linear", "linear"},
          {"cosine", "cosine"},
          {"inverse-square-root", "inverse_square_root"}},
         ""},
        {"--lr-decay-iters", Kind::kValue, "training.lr_decay_iters", {}, ""},
        {"--lr-decay-samples", Kind::kValue, "training.lr_decay_samples", {}, ""},
        {"--lr-warmup-iters", Kind::kValue, "training.lr_warmup_iters", {}, ""},
        {"--lr-warmup-samples", Kind::kValue, "training.lr_warmup_samples", {}, ""},
        {"--lr-warmup-fraction", Kind::kValue, "training.lr_warmup_fraction", {}, ""},
        {"--optimizer",
         Kind::kChoice,
         "training.optimizer",
         {{"adam", "adam"}, {"sgd", "sgd"}},
         ""},
        {"--weight-decay", Kind::kValue, "training.weight_decay", {}, ""},
        {"--adam-beta1", Kind::kValue, "training.adam_beta1", {}, ""},
        {"--adam-beta2", Kind::kValue, "training.adam_beta2", {}, ""},
        {"--adam-eps", Kind::kValue, "training.adam_eps", {}, ""},
        {"--sgd-momentum", Kind::kValue, "training.sgd_momentum", {}, ""},
        {"--clip-grad", Kind::kValue, "training.clip_grad", {}, ""},
        {"--fp16", Kind::kPrecision, "training.precision", {{"", "fp16"}}, ""},
        {"--bf16", Kind::kPrecision, "training.precision", {{"", "bf16"}}, ""},
        {"--loss-scale", Kind::kValue, "training.loss_scale", {}, ""},
        {"--initial-loss-scale", Kind::kValue, "training.initial_loss_scale", {}, ""},
        {"--min-loss-scale", Kind::kValue, "training.min_loss_scale", {}, ""},
        {"--loss-scale-window", Kind::kValue, "training.loss_scale_window", {}, ""},
        {"--hysteresis", Kind::kValue, "training.hysteresis", {}, ""},
        {"--recompute-granularity",
         Kind::kChoice,
         "training.recompute_granularity",
         {{"full", "full"}, {"selective", "selective"}},
         ""},
        {"--recompute-method",
         Kind::kChoice,
         "training.recompute_method",
         {{"uniform", "uniform"}, {"block", "block"}},
         ""},
        {"--recompute-num-layers", Kind::kValue, "training.recompute_num_layers", {}, ""},
        // Older Megatron-LM spellings of the recompute flags.
        {"--checkpoint-activations",
         Kind::kRecompute,
         "training.recompute_granularity",
         {{"", "full"}},
         ""},
        {"--recompute-activations",
         Kind::kRecompute,
         "training.recompute_granularity",
         {{"", "selective"}},
         ""},
        {"--checkpoint-num-layers", Kind::kValue, "training.recompute_num_layers", {}, ""},
        {"--seed", Kind::kValue, "training.seed", {}, ""},
        {"--accumulate-allreduce-grads-in-fp32",
         Kind::kTrue,
         "training.accumulate_allreduce_grads_in_fp32",
         {},
         ""},
        // data
        {"--data-path", Kind::kDataPaths, "data.data_path", {}, ""},
        {"--split", Kind::kSplit, "data.split", {}, ""},
        {"--train-data-path", Kind::kDataPaths, "data.train_data_path", {}, ""},
        {"--valid-data-path", Kind::kDataPaths, "data.valid_data_path", {}, ""},
        {"--test-data-path", Kind::kDataPaths, "data.test_data_path", {}, ""},
        {"--vocab-file", Kind::kValue, "data.tokenizer.vocab_file", {}, ""},
        {"--merge-file", Kind::kValue, "data.tokenizer.merge_file", {}, ""},
        {"--tokenizer-type",
         Kind::kChoice,
         "data.tokenizer.type",
         {{"GPT2BPETokenizer", "gpt2_bpe"}},
         ""},
        {"--data-cache-path", Kind::kValue, "data.data_cache_path", {}, ""},
        {"--num-workers", Kind::kValue, "data.num_workers", {}, ""},
        // checkpoint
        {"--save", Kind::kValue, "checkpoint.save_dir", {}, ""},
        {"--load", Kind::kValue, "checkpoint.load_dir", {}, ""},
        {"--save-interval", Kind::kValue, "checkpoint.save_interval", {}, ""},
        {"--async-save", Kind::kTrue, "checkpoint.async_save", {}, ""},
        {"--no-load-optim", Kind::kTrue, "checkpoint.no_load_optim", {}, ""},
        {"--no-load-rng", Kind::kTrue, "checkpoint.no_load_rng", {}, ""},
        {"--finetune", Kind::kTrue, "checkpoint.finetune", {}, ""},
        // evaluation, logging
        {"--eval-interval", Kind::kValue, "evaluation.eval_interval", {}, ""},
        {"--eval-iters", Kind::kValue, "evaluation.eval_iters", {}, ""},
        {"--log-interval", Kind::kValue, "logging.log_interval", {}, ""},
        {"--tensorboard-dir", Kind::kValue, "logging.tensorboard_dir", {}, ""},

        // Accepted without effect.
        {"--dataset-impl",
         Kind::kNoEffectValue,
         "",
         {{"mmap", ""}, {"infer", ""}},
         "mt reads Megatron's mmap (MMIDIDX) format"},
        {"--distributed-backend",
         Kind::kNoEffectValue,
         "",
         {{"nccl", ""}, {"gloo", ""}},
         "mt uses NCCL on GPUs and Gloo on CPUs, by resources.device"},
        {"--DDP-impl", Kind::kNoEffectValue, "", {{"local", ""}, {"torch", ""}}, ""},
        {"--transformer-impl",
         Kind::kNoEffectValue,
         "",
         {{"local", ""}, {"transformer_engine", ""}},
         ""},
        {"--position-embedding-type", Kind::kNoEffectValue, "", {{"learned_absolute", ""}}, kArch},
        {"--normalization", Kind::kNoEffectValue, "", {{"LayerNorm", ""}}, kArch},
        {"--tensorboard-log-interval", Kind::kNoEffectValue, "", {{"<int>", ""}}, ""},
        {"--tensorboard-queue-size", Kind::kNoEffectValue, "", {{"<int>", ""}}, ""},
        {"--timing-log-level", Kind::kNoEffectValue, "", {{"0", ""}, {"1", ""}, {"2", ""}}, ""},
        {"--empty-unused-memory-level",
         Kind::kNoEffectValue,
         "",
         {{"0", ""}, {"1", ""}, {"2", ""}},
         ""},
        {"--distributed-timeout-minutes",
         Kind::kValue,
         "restart.distributed_timeout_minutes",
         {},
         ""},
        {"--exit-interval",
         Kind::kNoEffectValue,
         "",
         {{"<int>", ""}},
         "a job runs to train_iters/train_samples; stop it early with mtctl cancel"},
        {"--exit-duration-in-mins",
         Kind::kNoEffectValue,
         "",
         {{"<int>", ""}},
         "a job runs to train_iters/train_samples; stop it early with mtctl cancel"},
        // torch.distributed.launch passes --local-rank (older: --local_rank) to the script.
        {"--local-rank", Kind::kNoEffectValue, "", {{"<int>", ""}}, kRanks},
        {"--local_rank", Kind::kNoEffectValue, "", {{"<int>", ""}}, kRanks},
        {"--no-masked-softmax-fusion", Kind::kNoEffect, "", {}, ""},
        {"--no-bias-gelu-fusion", Kind::kNoEffect, "", {}, ""},
        {"--no-bias-dropout-fusion", Kind::kNoEffect, "", {}, ""},
        {"--no-gradient-accumulation-fusion", Kind::kNoEffect, "", {}, ""},
        {"--no-async-tensor-model-parallel-allreduce", Kind::kNoEffect, "", {}, ""},
        {"--no-persist-layer-norm", Kind::kNoEffect, "", {}, ""},
        {"--use-flash-attn", Kind::kNoEffect, "", {}, ""},
        {"--use-mcore-models", Kind::kNoEffect, "", {}, ""},
        {"--use-legacy-models", Kind::kNoEffect, "", {}, ""},
        {"--attention-softmax-in-fp32", Kind::kNoEffect, "", {}, ""},
        {"--apply-query-key-layer-scaling", Kind::kNoEffect, "", {}, ""},
        {"--no-query-key-layer-scaling", Kind::kNoEffect, "", {}, ""},
        {"--log-timers-to-tensorboard", Kind::kNoEffect, "", {}, kLogging},
        {"--log-validation-ppl-to-tensorboard", Kind::kNoEffect, "", {}, kLogging},
        {"--log-memory-to-tensorboard", Kind::kNoEffect, "", {}, kLogging},
        {"--log-batch-size-to-tensorboard", Kind::kNoEffect, "", {}, kLogging},
        {"--log-world-size-to-tensorboard", Kind::kNoEffect, "", {}, kLogging},
        {"--log-params-norm", Kind::kNoEffect, "", {}, kLogging},
        {"--log-num-zeros-in-grad", Kind::kNoEffect, "", {}, kLogging},
        {"--log-throughput", Kind::kNoEffect, "", {}, kLogging},
        {"--no-save-optim",
         Kind::kNoEffect,
         "",
         {},
         "mt checkpoints always hold the optimizer state"},
        {"--no-save-rng", Kind::kNoEffect, "", {}, "mt checkpoints always hold the RNG state"},

        // Real Megatron-LM flags for things mt does not do.
        {"--swiglu", Kind::kUnsupported, "", {}, kArch},
        {"--squared-relu", Kind::kUnsupported, "", {}, kArch},
        {"--use-rotary-position-embeddings", Kind::kUnsupported, "", {}, kArch},
        {"--no-position-embedding", Kind::kUnsupported, "", {}, kArch},
        {"--disable-bias-linear", Kind::kUnsupported, "", {}, kArch},
        {"--group-query-attention", Kind::kUnsupported, "", {}, kArch},
        {"--apply-layernorm-1p", Kind::kUnsupported, "", {}, kArch},
        {"--num-query-groups", Kind::kUnsupportedValue, "", {}, kArch},
        {"--rotary-percent", Kind::kUnsupportedValue, "", {}, kArch},
        {"--num-experts", Kind::kUnsupportedValue, "", {}, "mt has no mixture of experts"},
        {"--fp8-format", Kind::kUnsupportedValue, "", {}, "mt trains in fp32, fp16 or bf16"},
    };
    return f;
  }();
  return *flags;
}

const FlagSpec* FindFlag(absl::string_view name) {
  for (const FlagSpec& f : Flags()) {
    if (f.flag == name) return &f;
  }
  return nullptr;
}

// Flags that are not pretrain_gpt.py's, with what to do instead.
std::string HintForUnknown(absl::string_view flag) {
  static const auto* hints = new std::map<std::string, std::string, std::less<>>{
      {"--gradient-accumulation-steps",
       "Megatron-LM has no such flag — set --global-batch-size instead (accumulation steps = "
       "global / (micro * data-parallel size))"},
      {"--batch-size",
       "Megatron-LM replaced it by --micro-batch-size (per rank) and --global-batch-size"},
      {"--warmup", "Megatron-LM replaced it by --lr-warmup-fraction"},
      {"--world-size",
       "Megatron-LM takes the world size from the launcher; in mt the coordinator sizes the job "
       "(parallel.world_size in a YAML spec)"},
      {"--data-parallel-size",
       "Megatron-LM derives it from the world size; in mt set parallel.data_parallel_size in a "
       "YAML spec or leave it auto"},
  };
  if (auto it = hints->find(flag); it != hints->end()) return it->second;
  static constexpr absl::string_view kTorchrun[] = {
      "--nproc_per_node", "--nproc-per-node", "--nnodes",        "--node_rank",
      "--node-rank",      "--master_addr",    "--master-addr",   "--master_port",
      "--master-port",    "--rdzv_endpoint",  "--rdzv-endpoint", "--rdzv_backend",
      "--rdzv-backend",   "--rdzv_id",        "--rdzv-id",       "--standalone"};
  for (absl::string_view t : kTorchrun) {
    if (flag == t) {
      return "a torchrun option, not a pretrain_gpt.py flag; mt places ranks itself — drop it";
    }
  }
  std::vector<std::string> names;
  for (const FlagSpec& f : Flags()) names.push_back(f.flag);
  const std::string nearest = internal::NearestName(flag, names);
  return nearest.empty() ? "" : StrCat("did you mean ", nearest, "?");
}

// A flag token: "--x", or "-x" that is not a negative number.
bool IsFlagToken(absl::string_view arg) {
  if (absl::StartsWith(arg, "--")) return true;
  if (absl::StartsWith(arg, "-") && arg.size() > 1) return !internal::ParseDouble(arg).ok();
  return false;
}

std::string Choices(const FlagSpec& spec) {
  std::vector<std::string> names;
  for (const auto& c : spec.choices) names.push_back(c.first);
  return absl::StrJoin(names, ", ");
}

std::string ExpectedValue(const FlagSpec& spec, const google::protobuf::FieldDescriptor* field) {
  if (spec.kind == Kind::kChoice || spec.kind == Kind::kNoEffectValue) {
    if (spec.choices.size() == 1 && spec.choices[0].first == "<int>") return "an integer";
    return StrCat("one of ", Choices(spec));
  }
  if (spec.kind == Kind::kDataPaths) return "a dataset prefix or weight-prefix pairs";
  if (spec.kind == Kind::kSplit) return "train,valid,test weights such as 969,30,1";
  if (field == nullptr) return "a value";
  switch (field->cpp_type()) {
    case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
    case google::protobuf::FieldDescriptor::CPPTYPE_FLOAT:
      return "a number";
    case google::protobuf::FieldDescriptor::CPPTYPE_STRING:
      return "a path";
    default:
      return "an integer";
  }
}

class FlagParser {
 public:
  absl::StatusOr<ParsedSpec> Parse(const std::vector<std::string>& args) {
    size_t i = 0;
    if (!args.empty() &&
        (args[0] == "pretrain_gpt.py" || absl::EndsWith(args[0], "/pretrain_gpt.py"))) {
      out_.warnings.push_back(
          StrCat(args[0], ": the script name is skipped; mt runs its own trainer"));
      i = 1;
    }
    const FlagSpec* previous = nullptr;
    while (i < args.size()) {
      const std::string& arg = args[i++];
      if (!IsFlagToken(arg) || arg == "--") {
        std::string hint;
        if (previous != nullptr && !TakesValue(previous->kind) &&
            previous->kind != Kind::kDataPaths) {
          hint = StrCat(" (", previous->flag, " takes no value)");
        }
        return Invalid(StrCat("unexpected argument ", Quote(arg),
                              ": pretrain_gpt.py takes only flags, and values follow their flag",
                              hint));
      }
      std::string name = arg;
      std::optional<std::string> inline_value;
      if (const size_t eq = arg.find('='); eq != std::string::npos) {
        name = arg.substr(0, eq);
        inline_value = arg.substr(eq + 1);
      }
      const FlagSpec* spec = FindFlag(name);
      if (spec == nullptr) {
        const std::string hint = HintForUnknown(name);
        return Invalid(StrCat("unknown flag ", name, hint.empty() ? "" : StrCat("; ", hint)));
      }
      previous = spec;
      const google::protobuf::FieldDescriptor* field = nullptr;
      google::protobuf::Message* parent = nullptr;
      if (!spec->field.empty()) {
        MT_ASSIGN_OR_RETURN(auto found, internal::MutableFieldByPath(&out_.spec, spec->field));
        parent = found.first;
        field = found.second;
      }
      // Values.
      std::vector<std::string> values;
      if (spec->kind == Kind::kDataPaths) {
        if (inline_value.has_value()) {
          values.push_back(*inline_value);
        } else {
          while (i < args.size() && !IsFlagToken(args[i])) values.push_back(args[i++]);
        }
        if (values.empty()) {
          return Invalid(
              StrCat(name, ": missing value (expected ", ExpectedValue(*spec, field), ")"));
        }
      } else if (TakesValue(spec->kind)) {
        if (inline_value.has_value()) {
          values.push_back(*inline_value);
        } else if (i < args.size() && !IsFlagToken(args[i])) {
          values.push_back(args[i++]);
        } else {
          return Invalid(
              StrCat(name, ": missing value (expected ", ExpectedValue(*spec, field), ")"));
        }
      } else if (inline_value.has_value()) {
        return Invalid(StrCat(name, " takes no value, got ", Quote(*inline_value)));
      }
      MT_RETURN_IF_ERROR(Apply(*spec, name, values, parent, field));
    }
    MT_RETURN_IF_ERROR(Finish());
    return std::move(out_);
  }

 private:
  static absl::Status Invalid(absl::string_view message) {
    return absl::InvalidArgumentError(message);
  }

  // Remembers who set a field last, to warn when a later flag overrides it.
  void Record(const std::string& field, const std::string& flag, const std::string& value) {
    auto it = set_by_.find(field);
    if (it != set_by_.end() && it->second.second != value) {
      const std::string shown = value.empty() ? flag : StrCat(flag, " ", value);
      const std::string before = it->second.second.empty()
                                     ? it->second.first
                                     : StrCat(it->second.first, " ", it->second.second);
      out_.warnings.push_back(it->second.first == flag
                                  ? StrCat(flag, " given twice; the last value (", value, ") wins")
                                  : StrCat(shown, " overrides ", before, " (the last one wins)"));
    }
    set_by_[field] = {flag, value};
  }

  absl::Status Apply(const FlagSpec& spec, const std::string& name,
                     const std::vector<std::string>& values, google::protobuf::Message* parent,
                     const google::protobuf::FieldDescriptor* field) {
    const std::string value = values.empty() ? "" : values[0];
    switch (spec.kind) {
      case Kind::kValue: {
        if (absl::Status s = internal::SetScalarFromText(parent, field, value); !s.ok()) {
          return Invalid(StrCat(name, ": ", s.message()));
        }
        Record(spec.field, name, value);
        return absl::OkStatus();
      }
      case Kind::kTrue:
        parent->GetReflection()->SetBool(parent, field, true);
        return absl::OkStatus();
      case Kind::kChoice: {
        for (const auto& [megatron, mt_name] : spec.choices) {
          if (value == megatron) {
            MT_RETURN_IF_ERROR(internal::SetScalarFromText(parent, field, mt_name));
            if (spec.field == "training.recompute_granularity") {
              SetRecompute(name, StrCat(name, " ", value), mt_name);
            }
            Record(spec.field, name, value);
            return absl::OkStatus();
          }
        }
        if (name == "--tokenizer-type") {
          return Invalid(
              StrCat("--tokenizer-type ", value, ": not supported; mt supports GPT2BPETokenizer"));
        }
        std::string extra;
        if (name == "--lr-decay-style" && value == "WSD") extra = " (WSD is not supported)";
        return Invalid(
            StrCat(name, ": expected ", ExpectedValue(spec, field), ", got ", Quote(value), extra));
      }
      case Kind::kDataPaths: {
        auto paths = internal::ParseFlatDataPaths(
            values, [&](int i) { return i < 0 ? name : StrCat(name, " value ", i + 1); });
        if (!paths.ok()) return paths.status();
        const google::protobuf::Reflection* r = parent->GetReflection();
        r->ClearField(parent, field);
        for (const auto& p : *paths) r->AddMessage(parent, field)->CopyFrom(p);
        Record(spec.field, name, absl::StrJoin(values, " "));
        return absl::OkStatus();
      }
      case Kind::kSplit: {
        // Megatron also reads "969/30/1".
        const std::string split = absl::StrReplaceAll(value, {{"/", ","}});
        if (auto s = internal::ParseSplit(split); !s.ok()) {
          return Invalid(StrCat(name, ": ", s.status().message()));
        }
        parent->GetReflection()->SetString(parent, field, split);
        Record(spec.field, name, value);
        return absl::OkStatus();
      }
      case Kind::kPrecision:
        precision_flags_.insert(name);
        return internal::SetScalarFromText(parent, field, spec.choices[0].second);
      case Kind::kRecompute:
        SetRecompute(name,
                     StrCat(name, " (= --recompute-granularity ", spec.choices[0].second, ")"),
                     spec.choices[0].second);
        return internal::SetScalarFromText(parent, field, spec.choices[0].second);
      case Kind::kNoEffect:
        out_.warnings.push_back(StrCat(name, ": accepted, no effect in mt",
                                       spec.note.empty() ? "" : StrCat(" (", spec.note, ")")));
        return absl::OkStatus();
      case Kind::kNoEffectValue: {
        bool ok = spec.choices.empty();
        for (const auto& c : spec.choices) {
          if (c.first == "<int>" ? internal::ParseInt(value, INT64_MIN, INT64_MAX).ok()
                                 : value == c.first) {
            ok = true;
          }
        }
        if (!ok) {
          if (!spec.note.empty() && spec.choices[0].first != "<int>") {
            return Invalid(StrCat(name, " ", value, ": not supported; ", spec.note,
                                  " (accepted: ", Choices(spec), ")"));
          }
          return Invalid(
              StrCat(name, ": expected ", ExpectedValue(spec, field), ", got ", Quote(value)));
        }
        out_.warnings.push_back(StrCat(name, " ", value, ": accepted, no effect in mt",
                                       spec.note.empty() ? "" : StrCat(" (", spec.note, ")")));
        return absl::OkStatus();
      }
      case Kind::kUnsupported:
        return Invalid(StrCat(name, ": not supported; ", spec.note));
      case Kind::kUnsupportedValue:
        return Invalid(StrCat(name, " ", value, ": not supported; ", spec.note));
    }
    return absl::InternalError(StrCat("unhandled flag ", name));
  }

  void SetRecompute(const std::string& flag, std::string described, std::string granularity) {
    recompute_.erase(std::remove_if(recompute_.begin(), recompute_.end(),
                                    [&](const auto& r) { return std::get<0>(r) == flag; }),
                     recompute_.end());
    recompute_.emplace_back(flag, std::move(described), std::move(granularity));
  }

  absl::Status Finish() {
    if (precision_flags_.size() > 1) {
      return Invalid(
          "--fp16 and --bf16 are mutually exclusive (Megatron-LM rejects the pair too); keep "
          "one");
    }
    std::set<std::string> granularities;
    for (const auto& r : recompute_) granularities.insert(std::get<2>(r));
    if (granularities.size() > 1) {
      std::vector<std::string> described;
      for (const auto& r : recompute_) described.push_back(std::get<1>(r));
      return Invalid(
          StrCat(absl::StrJoin(described, " and "), " contradict each other; keep one of them"));
    }
    return absl::OkStatus();
  }

  ParsedSpec out_;
  std::map<std::string, std::pair<std::string, std::string>> set_by_;  // field -> (flag, value)
  std::set<std::string> precision_flags_;
  // The flags that set the recompute granularity, in order: (flag, how to name it in an error,
  // the granularity it asks for). A repeated flag keeps its last value.
  std::vector<std::tuple<std::string, std::string, std::string>> recompute_;
};

}  // namespace

absl::StatusOr<ParsedSpec> ParseMegatronFlags(const std::vector<std::string>& args) {
  FlagParser parser;
  return parser.Parse(args);
}

std::string MegatronFlagForField(absl::string_view field_path) {
  if (field_path == "training.precision") return "--fp16 / --bf16";
  for (const FlagSpec& f : Flags()) {
    if (f.field == field_path) return f.flag;
  }
  return "";
}

std::vector<std::string> KnownMegatronFlags() {
  std::vector<std::string> out;
  for (const FlagSpec& f : Flags()) {
    if (f.kind != Kind::kUnsupported && f.kind != Kind::kUnsupportedValue) out.push_back(f.flag);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace mt::spec
