#include "worker/train/eval_command.h"

#include <cstdio>
#include <limits>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/json.h"
#include "common/base/status_macros.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/engine/data_sources.h"
#include "worker/generate/evaluator.h"
#include "worker/generate/inference_model.h"
#include "worker/model/gpt.h"
#include "worker/train/command_args.h"

namespace mt::train {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

constexpr char kUsage[] =
    "usage: mt-worker eval CHECKPOINT --data-path PREFIX [--split 969,30,1]\n"
    "         [--eval-iters N (100) | --all] [--micro-batch-size B] [--context-length S]\n"
    "         [--seed S] [--device cpu|cuda[:N]] [--dtype auto|fp32|bf16|fp16]\n"
    "         [--attention auto|math|fused] [--quantize none|int8] [-o text|json]\n"
    "Evaluates the validation part of PREFIX.bin/.idx (--split 0,1,0: all of it).\n"
    "--quantize int8: the transformer layers' linear weights as int8 (per output channel).\n";

int Fail(int code, const absl::Status& s) {
  std::fprintf(stderr, "mt-worker eval: %s\n", std::string(s.message()).c_str());
  if (code == kExitUsage && absl::IsInvalidArgument(s)) std::fputs(kUsage, stderr);
  return code;
}

const std::set<std::string>& ValueFlags() {
  static const auto* flags = new std::set<std::string>{
      "--data-path", "--split",  "--eval-iters", "--micro-batch-size", "--context-length",
      "--seed",      "--device", "--dtype",      "--attention",        "--quantize",
      "-o"};
  return *flags;
}

absl::StatusOr<EvalPlan> PlanFrom(const CommandArgs& args, const mt::v1::JobSpec& spec,
                                  int64_t positions) {
  EvalPlan p;
  p.prefix = args.Get("--data-path", "");
  if (p.prefix.empty()) return absl::InvalidArgumentError("--data-path PREFIX is required");
  p.split = args.Get("--split", spec::kDefaultSplit);
  const int64_t spec_seq = spec.model().seq_length();
  const int64_t default_seq = spec_seq > 0 && spec_seq <= positions ? spec_seq : positions;
  MT_ASSIGN_OR_RETURN(p.context, args.Int("--context-length", default_seq, 2, positions));
  const int64_t spec_micro = spec.training().micro_batch_size();
  MT_ASSIGN_OR_RETURN(p.micro_batch,
                      args.Int("--micro-batch-size", spec_micro > 0 ? spec_micro : 4, 1, 1 << 16));
  if (args.switches.count("--all") > 0 && args.Has("--eval-iters")) {
    return absl::InvalidArgumentError("give --eval-iters N or --all, not both");
  }
  if (args.switches.count("--all") == 0) {
    MT_ASSIGN_OR_RETURN(p.iters, args.Int("--eval-iters", spec::kDefaultEvalIters, 1, 1 << 30));
  }
  const uint64_t spec_seed =
      spec.training().has_seed() ? spec.training().seed() : spec::kDefaultSeed;
  MT_ASSIGN_OR_RETURN(int64_t seed, args.Int("--seed", static_cast<int64_t>(spec_seed), 0,
                                             std::numeric_limits<uint32_t>::max()));
  p.seed = static_cast<uint32_t>(seed);
  return p;
}

}  // namespace

absl::StatusOr<EvalPlan> EvalPlanFromArgs(const std::vector<std::string>& argv,
                                          const mt::v1::JobSpec& training, int64_t positions) {
  MT_ASSIGN_OR_RETURN(CommandArgs args, ParseCommandArgs(argv, ValueFlags(), {"--all"}));
  return PlanFrom(args, training, positions);
}

engine::EvalDataRequest EvalDataRequestFor(const EvalPlan& plan, const mt::v1::JobSpec& training,
                                           int64_t batch_rows) {
  engine::EvalDataRequest request;
  request.prefix = plan.prefix;
  request.split = plan.split;
  request.seq_length = plan.context;
  request.seed = plan.seed;
  request.micro_batch_size = batch_rows;
  request.num_samples = plan.iters * batch_rows;
  request.training_spec = &training;
  return request;
}

const char* EvalCommandUsage() { return kUsage; }

absl::StatusOr<EvalRun> EvaluateFromArgs(const std::vector<std::string>& argv,
                                         const std::function<void(int64_t)>& on_batch,
                                         bool* usage_error) {
  *usage_error = true;
  MT_ASSIGN_OR_RETURN(CommandArgs args, ParseCommandArgs(argv, ValueFlags(), {"--all"}));
  if (args.positional.size() != 1) return absl::InvalidArgumentError("give one CHECKPOINT");
  MT_RETURN_IF_ERROR(OutputFormatFrom(args).status());
  if (!args.Has("--data-path")) {
    return absl::InvalidArgumentError("--data-path PREFIX is required");
  }
  EvalRun run;
  MT_ASSIGN_OR_RETURN(run.loaded,
                      generate::LoadInferenceModel(args.positional[0], InferenceOptionsFrom(args)));
  const mt::v1::JobSpec& training = run.loaded.manifest.spec();
  MT_ASSIGN_OR_RETURN(EvalPlan plan,
                      PlanFrom(args, training, run.loaded.model->config().max_positions()));
  MT_ASSIGN_OR_RETURN(engine::EvalData data, engine::EvaluationDataSource(EvalDataRequestFor(
                                                 plan, training, plan.micro_batch)));
  run.micro_batch_size = plan.micro_batch;
  run.context_length = plan.context;
  run.same_samples_as_training = data.same_samples_as_training;
  absl::StatusOr<generate::EvalResult> r =
      generate::EvaluateLoss(*run.loaded.model, *data.source, plan.micro_batch,
                             plan.iters > 0 ? plan.iters : -1, on_batch);
  if (!r.ok()) {
    *usage_error = absl::IsInvalidArgument(r.status());
    return r.status();
  }
  run.result = *r;
  *usage_error = false;
  return run;
}

std::string EvalRunJson(const EvalRun& run) {
  const generate::EvalResult& r = run.result;
  return absl::StrFormat(
      "{\"checkpoint\":%s,\"step\":%d,\"loss\":%.6f,\"perplexity\":%.6f,\"tokens\":%d,"
      "\"micro_batches\":%d,\"micro_batch_size\":%d,\"context_length\":%d,"
      "\"same_samples_as_training\":%s,\"seconds\":%.3f}",
      JsonQuote(run.loaded.dir), run.loaded.manifest.step(), r.loss, r.perplexity, r.tokens,
      r.batches, run.micro_batch_size, run.context_length,
      run.same_samples_as_training ? "true" : "false", r.seconds);
}

int RunEvalCommand(const std::vector<std::string>& argv) {
  absl::StatusOr<CommandArgs> args = ParseCommandArgs(argv, ValueFlags(), {"--all"});
  if (!args.ok()) return Fail(kExitUsage, args.status());
  if (args->switches.count("--help") > 0) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  bool usage_error = false;
  absl::StatusOr<EvalRun> run = EvaluateFromArgs(argv, {}, &usage_error);
  if (!run.ok()) return Fail(usage_error ? kExitUsage : kExitFailed, run.status());
  const generate::EvalResult& r = run->result;
  if (*OutputFormatFrom(*args) == "json") {
    std::printf("%s\n", EvalRunJson(*run).c_str());
  } else {
    std::printf(
        "checkpoint=%s step=%lld loss=%.6f perplexity=%.4f tokens=%lld micro_batches=%lld\n",
        run->loaded.dir.c_str(), static_cast<long long>(run->loaded.manifest.step()), r.loss,
        r.perplexity, static_cast<long long>(r.tokens), static_cast<long long>(r.batches));
  }
  return kExitOk;
}

}  // namespace mt::train
