#include "worker/train/eval_command.h"

#include <cstdio>
#include <limits>
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
    "         [--attention auto|math|fused] [-o text|json]\n"
    "Evaluates the validation part of PREFIX.bin/.idx (--split 0,1,0: all of it).\n";

int Fail(int code, const absl::Status& s) {
  std::fprintf(stderr, "mt-worker eval: %s\n", std::string(s.message()).c_str());
  if (code == kExitUsage && absl::IsInvalidArgument(s)) std::fputs(kUsage, stderr);
  return code;
}

struct EvalPlan {
  std::string prefix;
  std::string split;
  int64_t micro_batch = 0;
  int64_t context = 0;
  int64_t iters = 0;  // 0 = --all
  uint32_t seed = 0;
};

absl::StatusOr<EvalPlan> PlanFrom(const CommandArgs& args, const generate::InferenceModel& m) {
  const mt::v1::JobSpec& spec = m.manifest.spec();
  EvalPlan p;
  p.prefix = args.Get("--data-path", "");
  if (p.prefix.empty()) return absl::InvalidArgumentError("--data-path PREFIX is required");
  p.split = args.Get("--split", spec::kDefaultSplit);
  const int64_t positions = m.model->config().max_positions();
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

// The result on stdout: key=value, or one JSON object.
void PrintResult(bool json, const generate::InferenceModel& loaded, const EvalPlan& plan,
                 bool same_samples, const generate::EvalResult& r) {
  const long long step = loaded.manifest.step();
  if (json) {
    std::printf(
        "{\"checkpoint\":%s,\"step\":%lld,\"loss\":%.6f,\"perplexity\":%.6f,\"tokens\":%lld,"
        "\"micro_batches\":%lld,\"micro_batch_size\":%lld,\"context_length\":%lld,"
        "\"same_samples_as_training\":%s,\"seconds\":%.3f}\n",
        JsonQuote(loaded.dir).c_str(), step, r.loss, r.perplexity, static_cast<long long>(r.tokens),
        static_cast<long long>(r.batches), static_cast<long long>(plan.micro_batch),
        static_cast<long long>(plan.context), same_samples ? "true" : "false", r.seconds);
  } else {
    std::printf(
        "checkpoint=%s step=%lld loss=%.6f perplexity=%.4f tokens=%lld micro_batches=%lld\n",
        loaded.dir.c_str(), step, r.loss, r.perplexity, static_cast<long long>(r.tokens),
        static_cast<long long>(r.batches));
  }
}

engine::EvalDataRequest RequestFor(const EvalPlan& plan, const mt::v1::JobSpec& training) {
  engine::EvalDataRequest request;
  request.prefix = plan.prefix;
  request.split = plan.split;
  request.seq_length = plan.context;
  request.seed = plan.seed;
  request.micro_batch_size = plan.micro_batch;
  request.num_samples = plan.iters * plan.micro_batch;
  request.training_spec = &training;
  return request;
}

}  // namespace

const char* EvalCommandUsage() { return kUsage; }

int RunEvalCommand(const std::vector<std::string>& argv) {
  absl::StatusOr<CommandArgs> args =
      ParseCommandArgs(argv,
                       {"--data-path", "--split", "--eval-iters", "--micro-batch-size",
                        "--context-length", "--seed", "--device", "--dtype", "--attention", "-o"},
                       {"--all"});
  if (!args.ok()) return Fail(kExitUsage, args.status());
  if (args->switches.count("--help") > 0) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (args->positional.size() != 1) {
    return Fail(kExitUsage, absl::InvalidArgumentError("give one CHECKPOINT"));
  }
  absl::StatusOr<std::string> format = OutputFormatFrom(*args);
  if (!format.ok()) return Fail(kExitUsage, format.status());
  if (!args->Has("--data-path")) {
    return Fail(kExitUsage, absl::InvalidArgumentError("--data-path PREFIX is required"));
  }
  absl::StatusOr<generate::InferenceModel> loaded =
      generate::LoadInferenceModel(args->positional[0], InferenceOptionsFrom(*args));
  if (!loaded.ok()) return Fail(kExitUsage, loaded.status());
  absl::StatusOr<EvalPlan> plan = PlanFrom(*args, *loaded);
  if (!plan.ok()) return Fail(kExitUsage, plan.status());
  absl::StatusOr<engine::EvalData> data =
      engine::EvaluationDataSource(RequestFor(*plan, loaded->manifest.spec()));
  if (!data.ok()) return Fail(kExitUsage, data.status());
  absl::StatusOr<generate::EvalResult> r = generate::EvaluateLoss(
      *loaded->model, *data->source, plan->micro_batch, plan->iters > 0 ? plan->iters : -1);
  if (!r.ok()) {
    return Fail(absl::IsInvalidArgument(r.status()) ? kExitUsage : kExitFailed, r.status());
  }
  PrintResult(*format == "json", *loaded, *plan, data->same_samples_as_training, *r);
  return kExitOk;
}

}  // namespace mt::train
