#include "worker/engine/train_command.h"

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
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/reshard.h"
#include "common/spec/defaults.h"
#include "common/spec/validate.h"
#include "common/spec/yaml_spec.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/checkpoint/trainer_state.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/data_sources.h"
#include "worker/engine/trainer.h"
#include "worker/metrics/tensorboard_logger.h"

namespace mt::engine {
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
  std::string tensorboard_dir;  // empty = the spec's
  // Megatron's checkpoint flags; each overrides the spec's checkpoint section when given.
  std::string save;
  std::string load;
  int64_t save_interval = -1;  // < 0 = the spec's
  bool async_save = false;
  bool help = false;
};

absl::StatusOr<TrainArgs> ParseArgs(const std::vector<std::string>& args) {
  TrainArgs out;
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
    } else if (name == "--attention") {
      MT_ASSIGN_OR_RETURN(out.attention, take_value());
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
  MT_RETURN_IF_ERROR(spec::ResolveForLayout(&job, /*data_parallel_size=*/1));
  return job;
}

}  // namespace

const char* TrainCommandUsage() {
  return "usage: mt-worker train --spec job.yaml [--device cpu|cuda|cuda:N] [--synthetic-data]\n"
         "                       [--train-iters N] [--peak-tflops F] [--attention "
         "auto|math|fused]\n"
         "                       [--save DIR] [--load DIR] [--save-interval N] [--async-save]\n"
         "\n"
         "Trains the job spec on this machine, one device (tp = pp = dp = 1).\n"
         "  --spec FILE        YAML job spec (as for mtctl submit)\n"
         "  --device D         cpu (default), cuda or cuda:N\n"
         "  --synthetic-data   deterministic random tokens instead of spec.data\n"
         "  --train-iters N    override training.train_iters\n"
         "  --peak-tflops F    device peak for MFU (default 989 on CUDA in bf16/fp16, else off)\n"
         "  --attention A      attention kernel: auto (fused where available), math, fused\n"
         "  --tensorboard-dir D  TensorBoard event files there (Megatron's scalar names)\n"
         "  --save DIR         save checkpoints there (checkpoint.save_dir)\n"
         "  --load DIR         resume from DIR's latest valid checkpoint, or a checkpoint or\n"
         "                     Hugging Face GPT-2 directory (checkpoint.load_dir); --load and\n"
         "                     --save the same directory continue a run where it stopped\n"
         "  --save-interval N  steps between saves (0: only at the end)\n"
         "  --async-save       write checkpoints in the background\n"
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
  // What to start from (--load / checkpoint.load_dir): its latest valid checkpoint, falling
  // back past damaged ones; none there = from scratch.
  const mt::v1::CheckpointSpec& ckpt_spec = job->checkpoint();
  std::optional<checkpoint::LoadChoice> load;
  if (!ckpt_spec.load_dir().empty()) {
    // One rank of a world of one: its files (a checkpoint of the same TP and PP sizes) are read
    // once, verified and kept in memory for the restore, and staged on a GPU as they are read.
    checkpoint::LoadOptions load_options;
    load_options.keep_own_files = true;
    load_options.stage_device = absl::StartsWith(args->device, "cuda") ? args->device : "";
    auto chosen = checkpoint::ChooseLoad(ckpt_spec.load_dir(), load_options);
    if (!chosen.ok()) {
      std::fprintf(stderr, "mt-worker train: --load: %s\n",
                   std::string(chosen.status().message()).c_str());
      return kExitFailed;
    }
    load = *std::move(chosen);
    if (load.has_value()) {
      for (const std::string& p : load->problems) {
        std::fprintf(stderr, "mt-worker train: skipped checkpoint %s\n", p.c_str());
      }
      std::fprintf(stderr, "mt-worker train: loading %s (step %lld)\n", load->dir.c_str(),
                   static_cast<long long>(load->manifest.step()));
    } else {
      std::fprintf(stderr, "mt-worker train: no checkpoint in %s; training from scratch\n",
                   ckpt_spec.load_dir().c_str());
    }
  }
  const bool weights_only =
      load.has_value() && (ckpt_spec.finetune() || !load->manifest.has_trainer());
  const int64_t consumed =
      load.has_value() && !weights_only ? load->manifest.trainer().consumed_samples() : 0;

  absl::StatusOr<DataSources> data = args->synthetic_data
                                         ? SyntheticDataSources(*job, 0, 1, consumed)
                                         : DataSourcesFromSpec(*job, consumed);
  if (!data.ok()) {
    std::fprintf(stderr, "mt-worker train: data: %s\n",
                 std::string(data.status().message()).c_str());
    const absl::StatusCode code = data.status().code();
    return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound ||
                   code == absl::StatusCode::kUnimplemented
               ? kExitUsage
               : kExitFailed;
  }

  TrainerOptions options;
  options.device = args->device;
  options.attention_backend = args->attention;
  const bool sixteen_bit = job->training().precision() == mt::v1::PRECISION_BF16 ||
                           job->training().precision() == mt::v1::PRECISION_FP16;
  double peak_tflops = args->peak_tflops;
  if (peak_tflops < 0) {
    peak_tflops =
        absl::StartsWith(args->device, "cuda") && sixteen_bit ? kDefaultCudaPeakTflops : 0;
  }
  options.peak_flops_per_second = peak_tflops * 1e12;
  // TensorBoard records every step's loss (Megatron's default interval of 1): read it back.
  options.sync_every_step = !job->logging().tensorboard_dir().empty();

  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(*job, options, std::move(data->train), std::move(data->valid));
  if (!trainer.ok()) {
    std::fprintf(stderr, "mt-worker train: %s\n", std::string(trainer.status().message()).c_str());
    return trainer.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  // Megatron's TensorBoard scalars (logging.tensorboard_dir / --tensorboard-dir).
  std::unique_ptr<worker::metrics::TensorBoardLogger> tensorboard;
  if (const std::string& dir = job->logging().tensorboard_dir(); !dir.empty()) {
    worker::metrics::TensorBoardOptions tb;
    tb.flops_per_token = (*trainer)->plan().flops_per_token;
    tb.global_batch_size = (*trainer)->plan().global_batch_size;
    auto logger = worker::metrics::TensorBoardLogger::Create(dir, tb, absl::Now());
    if (!logger.ok()) {
      std::fprintf(stderr, "mt-worker train: %s\n", std::string(logger.status().message()).c_str());
      return kExitFailed;
    }
    tensorboard = *std::move(logger);
  }
  Trainer& t = **trainer;
  if (load.has_value()) {
    // From the bytes verified above (or their device copies), not a second read of the files.
    auto source = checkpoint::OpenLoadSource(*load);
    checkpoint::RestoreOptions restore;
    restore.load_optimizer = !ckpt_spec.no_load_optim();
    restore.load_rng = !ckpt_spec.no_load_rng();
    restore.weights_only = weights_only;
    const absl::Status s =
        source.ok() ? checkpoint::RestoreTrainer(t, **source, restore) : source.status();
    if (!s.ok()) {
      std::fprintf(stderr, "mt-worker train: loading %s: %s\n", load->dir.c_str(),
                   std::string(s.message()).c_str());
      return kExitFailed;
    }
    source->reset();
    load->files.reset();  // the files kept in memory for the restore
    load->attachment.reset();
  }
  checkpoint::LocalExchange exchange;
  std::unique_ptr<checkpoint::Checkpointer> saver;
  if (!ckpt_spec.save_dir().empty()) {
    checkpoint::CheckpointerOptions o;
    o.save_dir = ckpt_spec.save_dir();
    o.async_save = ckpt_spec.async_save();
    o.job_id = "local";
    o.spec = *job;
    auto c = checkpoint::Checkpointer::Create(o, &exchange);
    if (!c.ok()) {
      std::fprintf(stderr, "mt-worker train: --save: %s\n",
                   std::string(c.status().message()).c_str());
      return kExitUsage;
    }
    saver = *std::move(c);
  }
  StepMetrics last;
  EvalMetrics last_eval;
  bool evaluated = false;
  double seconds = 0;
  int64_t tokens = 0;
  int saves = 0;
  absl::Status save_status;
  auto take_saves = [&]() {
    if (saver == nullptr) return;
    for (const checkpoint::SaveInfo& info : saver->TakeFinished()) {
      if (!info.status.ok()) {
        if (save_status.ok()) save_status = info.status;
        continue;
      }
      ++saves;
      std::fprintf(stderr, "mt-worker train: saved %s (%lld bytes, %.3f s)\n",
                   info.directory.c_str(), static_cast<long long>(info.bytes), info.seconds);
    }
  };
  auto save = [&]() {
    if (saver == nullptr || saver->last_saved_step() == t.iteration() || !save_status.ok()) return;
    save_status = saver->Save(t, last.loss, evaluated ? last_eval.loss : std::nan(""));
    take_saves();
  };
  const int64_t save_interval = ckpt_spec.save_interval();
  const absl::Status status = t.Train(
      [&](const StepMetrics& m) {
        last = m;
        seconds += m.seconds;
        tokens += m.tokens;
        if (tensorboard != nullptr) tensorboard->OnStep(m, absl::Now());
        take_saves();
        if (save_interval > 0 && m.iteration % save_interval == 0) save();
        return save_status.ok();
      },
      [&](const EvalMetrics& e) {
        last_eval = e;
        evaluated = true;
        if (tensorboard != nullptr) {
          tensorboard->OnEval(e, (*trainer)->consumed_samples(), absl::Now());
        }
      });
  if (tensorboard != nullptr) {
    if (absl::Status s = tensorboard->Flush(); !s.ok()) {
      std::fprintf(stderr, "mt-worker train: TensorBoard: %s\n", std::string(s.message()).c_str());
    }
  }
  if (!status.ok()) {
    std::fprintf(stderr, "mt-worker train: %s\n", std::string(status.message()).c_str());
    return kExitFailed;
  }
  save();  // the last step is always saved
  if (saver != nullptr) {
    saver->Wait();
    take_saves();
  }
  if (!save_status.ok()) {
    std::fprintf(stderr, "mt-worker train: saving the checkpoint: %s\n",
                 std::string(save_status.message()).c_str());
    return kExitFailed;
  }
  std::string summary = absl::StrFormat(
      "iterations=%d loss=%.6f skipped=%d tokens=%d seconds=%.3f tokens_per_second=%.1f",
      last.iteration, last.loss, last.skipped_total, tokens, seconds,
      seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0);
  if (saver != nullptr) absl::StrAppend(&summary, " checkpoints=", saves);
  if (evaluated) {
    absl::StrAppend(&summary, absl::StrFormat(" valid_loss=%.6f valid_perplexity=%.4f",
                                              last_eval.loss, last_eval.perplexity));
  }
  std::printf("%s\n", summary.c_str());
  return kExitOk;
}

}  // namespace mt::engine
