#include "worker/train/train_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"
#include "common/spec/defaults.h"
#include "common/spec/validate.h"
#include "common/spec/yaml_spec.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/engine/cpu_process.h"
#include "worker/engine/data_sources.h"
#include "worker/engine/trainer.h"
#include "worker/kernels/gemm_tuning.h"
#include "worker/train/log_reporter.h"
#include "worker/train/session.h"

namespace mt::train {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// Dense bf16/fp16 peak of an H100/H200 (DESIGN.md §9), the default for MFU on CUDA.
constexpr double kDefaultCudaPeakTflops = 989.0;

struct TrainArgs {
  std::string spec_path;
  std::string device = "cpu";
  bool synthetic_data = false;
  int64_t train_iters = 0;    // 0 = the spec's
  double peak_tflops = -1.0;  // < 0 = default
  std::string attention = "auto";
  std::string mlp_gelu = "auto";
  std::string tensorboard_dir;  // empty = the spec's
  // Megatron's checkpoint flags; each overrides the spec's checkpoint section when given.
  std::string save;
  std::string load;
  int64_t save_interval = -1;  // < 0 = the spec's
  bool async_save = false;
  bool fused_lm_head = true;
  bool fused_mlp = true;
  bool fused_layernorm = true;
  bool fused_qkv = true;
  bool fused_embedding = true;
  bool fold_linear_bias = true;
  bool fused_dropout_add = false;
  bool cuda_graph = true;
  bool overlap_optimizer = true;
  bool gemm_tuning = true;
  bool gemm_workspace = false;
  int gemm_tune_candidates = kernels::kDefaultGemmTuneCandidates;
  bool help = false;
};

// The switch `name` turns on or off (--X / --no-X), or null.
bool* OnOffSwitch(const std::string& name, TrainArgs* args, bool* on) {
  const struct {
    const char* suffix;
    bool TrainArgs::*field;
  } switches[] = {{"fused-lm-head", &TrainArgs::fused_lm_head},
                  {"fused-mlp", &TrainArgs::fused_mlp},
                  {"fused-layernorm", &TrainArgs::fused_layernorm},
                  {"fused-qkv", &TrainArgs::fused_qkv},
                  {"fused-embedding", &TrainArgs::fused_embedding},
                  {"fold-linear-bias", &TrainArgs::fold_linear_bias},
                  {"fused-dropout-add", &TrainArgs::fused_dropout_add},
                  {"cuda-graph", &TrainArgs::cuda_graph},
                  {"overlap-optimizer", &TrainArgs::overlap_optimizer},
                  {"gemm-tuning", &TrainArgs::gemm_tuning},
                  {"gemm-workspace", &TrainArgs::gemm_workspace}};
  for (const auto& s : switches) {
    if (name == absl::StrCat("--", s.suffix) || name == absl::StrCat("--no-", s.suffix)) {
      *on = !absl::StartsWith(name, "--no-");
      return &(args->*s.field);
    }
  }
  return nullptr;
}

absl::StatusOr<TrainArgs> ParseArgs(const std::vector<std::string>& args) {
  TrainArgs out;
  bool on = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_value = false;
    if (const size_t eq = name.find('='); absl::StartsWith(name, "--") && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto take_value = [&]() -> absl::StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= args.size())
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      return args[++i];
    };
    if (name == "--help" || name == "-h") {
      out.help = true;
    } else if (name == "--spec") {
      MT_ASSIGN_OR_RETURN(out.spec_path, take_value());
    } else if (name == "--device") {
      MT_ASSIGN_OR_RETURN(out.device, take_value());
    } else if (name == "--synthetic-data") {
      if (has_value) return absl::InvalidArgumentError("--synthetic-data takes no value");
      out.synthetic_data = true;
    } else if (name == "--train-iters") {
      MT_ASSIGN_OR_RETURN(std::string v, take_value());
      if (!absl::SimpleAtoi(v, &out.train_iters) || out.train_iters < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("--train-iters \"", v, "\": want an integer >= 1"));
      }
    } else if (name == "--peak-tflops") {
      MT_ASSIGN_OR_RETURN(std::string v, take_value());
      if (!absl::SimpleAtod(v, &out.peak_tflops) || out.peak_tflops < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--peak-tflops \"", v, "\": want a number >= 0"));
      }
    } else if (name == "--gemm-tune-candidates") {
      MT_ASSIGN_OR_RETURN(std::string v, take_value());
      if (!absl::SimpleAtoi(v, &out.gemm_tune_candidates) || out.gemm_tune_candidates < 1 ||
          out.gemm_tune_candidates > kernels::kMaxGemmTuneCandidates) {
        return absl::InvalidArgumentError(absl::StrCat("--gemm-tune-candidates \"", v,
                                                       "\": want an integer from 1 to ",
                                                       kernels::kMaxGemmTuneCandidates));
      }
    } else if (name == "--attention") {
      MT_ASSIGN_OR_RETURN(out.attention, take_value());
    } else if (name == "--mlp-gelu") {
      MT_ASSIGN_OR_RETURN(out.mlp_gelu, take_value());
    } else if (name == "--tensorboard-dir") {
      MT_ASSIGN_OR_RETURN(out.tensorboard_dir, take_value());
    } else if (name == "--save") {
      MT_ASSIGN_OR_RETURN(out.save, take_value());
    } else if (name == "--load") {
      MT_ASSIGN_OR_RETURN(out.load, take_value());
    } else if (name == "--save-interval") {
      MT_ASSIGN_OR_RETURN(std::string v, take_value());
      if (!absl::SimpleAtoi(v, &out.save_interval) || out.save_interval < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--save-interval \"", v, "\": want an integer >= 0"));
      }
    } else if (name == "--async-save") {
      if (has_value) return absl::InvalidArgumentError("--async-save takes no value");
      out.async_save = true;
    } else if (bool* flag = OnOffSwitch(name, &out, &on)) {
      if (has_value) return absl::InvalidArgumentError(absl::StrCat(name, " takes no value"));
      *flag = on;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument \"", args[i], "\""));
    }
  }
  if (!out.help && out.spec_path.empty()) return absl::InvalidArgumentError("--spec is required");
  return out;
}

// The spec as a submitted job would have it, with the command's overrides.
absl::StatusOr<mt::v1::JobSpec> LoadSpec(const TrainArgs& args) {
  MT_ASSIGN_OR_RETURN(std::string text, ReadFile(args.spec_path, spec::kMaxYamlSpecBytes));
  absl::StatusOr<spec::ParsedSpec> parsed = spec::ParseYamlSpec(text);
  if (!parsed.ok()) return Annotate(parsed.status(), args.spec_path);
  for (const std::string& w : parsed->warnings) {
    std::fprintf(stderr, "mt-worker train: %s: warning: %s\n", args.spec_path.c_str(), w.c_str());
  }
  mt::v1::JobSpec job = std::move(parsed->spec);
  if (args.train_iters > 0) {
    job.mutable_training()->set_train_iters(args.train_iters);
    job.mutable_training()->clear_train_samples();
    job.mutable_training()->clear_lr_decay_samples();
    job.mutable_training()->clear_lr_warmup_samples();
  }
  if (!args.tensorboard_dir.empty())
    job.mutable_logging()->set_tensorboard_dir(args.tensorboard_dir);
  mt::v1::CheckpointSpec* ckpt = job.mutable_checkpoint();
  if (!args.save.empty()) ckpt->set_save_dir(args.save);
  if (!args.load.empty()) ckpt->set_load_dir(args.load);
  if (args.save_interval >= 0) ckpt->set_save_interval(args.save_interval);
  if (args.async_save) ckpt->set_async_save(true);
  spec::ApplyDefaults(&job);
  std::vector<std::string> problems = spec::ListSpecProblems(job);
  if (args.synthetic_data) {
    // Synthetic tokens replace the data section entirely.
    problems.erase(
        std::remove_if(problems.begin(), problems.end(),
                       [](const std::string& p) { return absl::StartsWith(p, "data."); }),
        problems.end());
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(args.spec_path, ": invalid job spec:\n  ", absl::StrJoin(problems, "\n  ")));
  }
  // One device: a data-parallel size of 1.
  MT_RETURN_IF_ERROR(spec::ResolveForLayout(&job, 1));
  return job;
}

// The session's configuration for one device.
SessionConfig LocalSessionConfig(const TrainArgs& args, const mt::v1::JobSpec& job) {
  SessionConfig c;
  c.spec = job;
  // What to start from (--load / checkpoint.load_dir); none there = from scratch.
  c.load_path = job.checkpoint().load_dir();
  // One rank of a world of one: its files (a checkpoint of the same TP and PP sizes) are read
  // once, verified and kept in memory for the restore, and staged on a GPU as they are read.
  c.load.keep_own_files = true;
  c.load.stage_device = absl::StartsWith(args.device, "cuda") ? args.device : "";
  const bool synthetic = args.synthetic_data;
  c.make_data = [job, synthetic](int64_t consumed) {
    return synthetic ? engine::SyntheticDataSources(job, 0, 1, consumed)
                     : engine::DataSourcesFromSpec(job, consumed);
  };
  c.trainer.device = args.device;
  c.trainer.attention_backend = args.attention;
  c.trainer.fused_lm_head = args.fused_lm_head;
  c.trainer.fused_mlp = args.fused_mlp;
  c.trainer.mlp_gelu = args.mlp_gelu;
  c.trainer.fused_layernorm = args.fused_layernorm;
  c.trainer.fused_qkv = args.fused_qkv;
  c.trainer.fused_embedding = args.fused_embedding;
  c.trainer.fold_linear_bias = args.fold_linear_bias;
  c.trainer.fused_dropout_add = args.fused_dropout_add;
  c.trainer.cuda_graph = args.cuda_graph;
  c.trainer.overlap_optimizer = args.overlap_optimizer;
  c.trainer.gemm_tuning = args.gemm_tuning;
  c.trainer.gemm_tune_candidates = args.gemm_tune_candidates;
  c.trainer.gemm_workspace = args.gemm_workspace;
  const bool sixteen_bit = job.training().precision() == mt::v1::PRECISION_BF16 ||
                           job.training().precision() == mt::v1::PRECISION_FP16;
  double peak_tflops = args.peak_tflops;
  if (peak_tflops < 0) {
    peak_tflops = absl::StartsWith(args.device, "cuda") && sixteen_bit ? kDefaultCudaPeakTflops : 0;
  }
  c.trainer.peak_flops_per_second = peak_tflops * 1e12;
  // TensorBoard records every step's loss (Megatron's default interval of 1): read it back.
  c.trainer.sync_every_step = !job.logging().tensorboard_dir().empty();
  c.checkpointer.job_id = "local";
  return c;
}

// Spec and data-setup mistakes are usage errors (2); the rest failed training (1).
int FailureExitCode(const SessionResult& r) {
  const absl::StatusCode code = r.status.code();
  switch (r.failed_at) {
    case SessionStage::kData:
      return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound ||
                     code == absl::StatusCode::kUnimplemented
                 ? kExitUsage
                 : kExitFailed;
    case SessionStage::kBuildTrainer:
      return code == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
    case SessionStage::kCheckpointer:
      return kExitUsage;
    default:
      return kExitFailed;
  }
}

// The "mt-worker train: ..." line for a failed session.
std::string FailureMessage(const SessionResult& r) {
  const std::string message(r.status.message());
  switch (r.failed_at) {
    case SessionStage::kChooseCheckpoint:
      return absl::StrCat("--load: ", message);
    case SessionStage::kData:
      return absl::StrCat("data: ", message);
    case SessionStage::kRestore:
      return absl::StrCat("loading ", r.load_dir, ": ", message);
    case SessionStage::kCheckpointer:
      return absl::StrCat("--save: ", message);
    case SessionStage::kPrepareSave:
    case SessionStage::kSave:
      return absl::StrCat("saving the checkpoint: ", message);
    default:
      return message;
  }
}

// The key=value line on stdout.
std::string Summary(const SessionResult& r) {
  const engine::StepMetrics& last = r.last_step;
  std::string summary = absl::StrFormat(
      "iterations=%d loss=%.6f skipped=%d tokens=%d seconds=%.3f tokens_per_second=%.1f",
      last.iteration, last.loss, last.skipped_total, r.tokens, r.seconds,
      r.seconds > 0 ? static_cast<double>(r.tokens) / r.seconds : 0.0);
  if (r.saving) absl::StrAppend(&summary, " checkpoints=", r.saves);
  if (r.evaluated) {
    absl::StrAppend(&summary, absl::StrFormat(" valid_loss=%.6f valid_perplexity=%.4f",
                                              r.last_eval.loss, r.last_eval.perplexity));
  }
  return summary;
}

}  // namespace

static_assert(kernels::kDefaultGemmTuneCandidates == 8 && kernels::kMaxGemmTuneCandidates == 64,
              "TrainCommandUsage says --gemm-tune-candidates takes 1 to 64, default 8");

const char* TrainCommandUsage() {
  return "usage: mt-worker train --spec job.yaml [--device cpu|cuda|cuda:N] [--synthetic-data]\n"
         "                       [--train-iters N] [--peak-tflops F] [--attention "
         "auto|math|fused|cudnn|flash]\n"
         "                       [--save DIR] [--load DIR] [--save-interval N] [--async-save]\n"
         "                       [--[no-]fused-lm-head] [--[no-]fused-mlp] "
         "[--[no-]fused-layernorm]\n"
         "                       [--[no-]fused-qkv] [--[no-]fused-embedding] "
         "[--[no-]fold-linear-bias]\n"
         "                       [--[no-]fused-dropout-add] "
         "[--[no-]cuda-graph] [--[no-]overlap-optimizer]\n"
         "                       [--[no-]gemm-tuning] "
         "[--gemm-tune-candidates N] [--[no-]gemm-workspace]\n"
         "                       [--mlp-gelu auto|epilogue|kernel]\n"
         "\n"
         "Trains the job spec on this machine, one device (tp = pp = dp = 1).\n"
         "  --spec FILE        YAML job spec (as for mtctl submit)\n"
         "  --device D         cpu (default), cuda or cuda:N\n"
         "  --synthetic-data   deterministic random tokens instead of spec.data\n"
         "  --train-iters N    override training.train_iters\n"
         "  --peak-tflops F    device peak for MFU (default 989 on CUDA in bf16/fp16, else off)\n"
         "  --attention A      attention kernel: auto (fused where available), math, fused,\n"
         "                     cudnn or flash (fused restricted to that kernel; CUDA)\n"
         "  --tensorboard-dir D  TensorBoard event files there (Megatron's scalar names)\n"
         "  --save DIR         save checkpoints there (checkpoint.save_dir)\n"
         "  --load DIR         resume from DIR's latest valid checkpoint, or a checkpoint or\n"
         "                     Hugging Face GPT-2 directory (checkpoint.load_dir); --load and\n"
         "                     --save the same directory continue a run where it stopped\n"
         "  --save-interval N  steps between saves (0: only at the end)\n"
         "  --async-save       write checkpoints in the background\n"
         "  --no-fused-lm-head the output layer and its loss as separate steps (default: one\n"
         "                     autograd node on CUDA)\n"
         "  --no-fused-mlp     the MLP's bias, GELU and their gradients as separate kernels\n"
         "                     (default: in the GEMMs' cuBLASLt epilogues on CUDA)\n"
         "  --no-fused-layernorm  LayerNorm and the residual add before it through LibTorch\n"
         "                     (default: one kernel each way on CUDA)\n"
         "  --no-fused-qkv     the QKV projection's gradient by LibTorch's split and its bias\n"
         "                     by a reduction (default: one gather kernel for both on CUDA)\n"
         "  --no-fused-embedding  the embeddings' gradients by LibTorch's backward (default on\n"
         "                     CUDA: one sort and two passes of mt's kernel)\n"
         "  --no-fold-linear-bias  the attention's output projection and fc2 add their biases\n"
         "                     in the GEMM and sum their gradients by a reduction (default in\n"
         "                     training without hidden dropout: the next LayerNorm's kernels\n"
         "                     add them and sum their gradients)\n"
         "  --fused-dropout-add  hidden dropout inside the next LayerNorm's kernel (Megatron's\n"
         "                     bias-dropout-add; the masks drawn there, none stored; the biases\n"
         "                     folded with dropout too); default off: LibTorch's dropout\n"
         "  --no-cuda-graph    every step launched kernel by kernel (default: the forward and\n"
         "                     backward replayed from one CUDA graph where the step allows it:\n"
         "                     one GPU, one micro-batch a step, no dropout that\n"
         "                     recomputation reruns; else eager, the reason logged)\n"
         "  --no-overlap-optimizer  AdamW's update inside the step (default where the step is a\n"
         "                     CUDA graph, in bf16 or fp32: on a stream of its own, each\n"
         "                     layer's update overlapping the next forward up to that layer)\n"
         "  --no-gemm-tuning   cuBLASLt's first-pick algorithms (default on CUDA: each GEMM\n"
         "                     problem of the linears and the LM head timed once over\n"
         "                     cuBLASLt's candidates and the fastest kept for the process)\n"
         "  --gemm-tune-candidates N  how many of cuBLASLt's candidates that timing tries\n"
         "                     (1 to 64, default 8)\n"
         "  --gemm-workspace   give every one of those GEMMs a cuBLASLt workspace (default: for\n"
         "                     the products and forward epilogues it is optional, and the\n"
         "                     tuning weighs the memset that it costs before each GEMM)\n"
         "  --mlp-gelu auto|epilogue|kernel  where the fused MLP applies fc1's bias and GELU in\n"
         "                     training: the GEMM's epilogue, a GELU kernel after the GEMM, or\n"
         "                     (auto, the default) the faster of the two for the shape, timed\n"
         "                     once a process on CUDA\n"
         "Progress on stderr; a final key=value summary on stdout.\n"
         "Exit codes: 0 trained, 1 training failed, 2 usage, spec or data-setup error.\n";
}

int RunTrainCommand(const std::vector<std::string>& argv) {
  absl::StatusOr<TrainArgs> args = ParseArgs(argv);
  if (!args.ok()) {
    std::fprintf(stderr, "mt-worker train: %s\n%s", std::string(args.status().message()).c_str(),
                 TrainCommandUsage());
    return kExitUsage;
  }
  if (args->help) {
    std::fputs(TrainCommandUsage(), stdout);
    return kExitOk;
  }
  absl::StatusOr<mt::v1::JobSpec> job = LoadSpec(*args);
  if (!job.ok()) {
    std::fprintf(stderr, "mt-worker train: %s\n", std::string(job.status().message()).c_str());
    return kExitUsage;
  }
  if (args->device == "cpu") engine::ConfigureCpuProcess(/*threads=*/0);
  LogReporter reporter(job->logging().tensorboard_dir());
  const SessionResult result = RunSession(LocalSessionConfig(*args, *job), reporter);
  if (!result.status.ok()) {
    std::fprintf(stderr, "mt-worker train: %s\n", FailureMessage(result).c_str());
    return FailureExitCode(result);
  }
  std::printf("%s\n", Summary(result).c_str());
  return kExitOk;
}

}  // namespace mt::train
