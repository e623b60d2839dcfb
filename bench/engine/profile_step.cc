// profile_step: where one training step of our trainer spends its GPU time. Builds the trainer
// from a job spec (bench/engine's generated specs: `bench_engine.py` writes them under
// $OUT/bench-engine/specs/), runs warm-up steps, then profiles a few steps with LibTorch's
// Kineto profiler and prints, on stdout, the step's wall time, how many of its cuBLASLt GEMM
// problems the tuning timed and moved off the first pick, the GPU's busy time and the top
// kernels by total time (name, calls per step, ms per step, share of the busy time).
//
//   profile_step --spec FILE [--device cuda] [--warmup 5] [--steps 3] [--top 25]
//                [--attention auto|math|fused|cudnn|flash] [--trace FILE.json]
//                [--[no-]fused-lm-head] [--[no-]fused-mlp] [--[no-]fused-layernorm]
//                [--[no-]fused-qkv] [--[no-]fold-linear-bias] [--[no-]cuda-graph]
//                [--[no-]overlap-optimizer] [--[no-]gemm-tuning] [--gemm-tune-candidates N]
//                [--[no-]gemm-workspace] [--[no-]fused-embedding]
//                [--mlp-gelu auto|epilogue|kernel]
//
// Needs a CUDA LibTorch >= 2.0 (Kineto); elsewhere it says so and exits 2.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "bench/profile/kernel_profile.h"
#include "common/base/files.h"
#include "common/cli/help_version.h"
#include "common/spec/defaults.h"
#include "common/spec/yaml_spec.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/engine/data_sources.h"
#include "worker/engine/trainer.h"
#include "worker/kernels/gemm_tuning.h"
#include "worker/kernels/mlp_gelu_choice.h"
#include "worker/kernels/tuned_mm.h"

#if TORCH_VERSION_MAJOR >= 2
#define MT_HAVE_KINETO 1
#else
#define MT_HAVE_KINETO 0
#endif

namespace {

constexpr char kUsage[] =
    "usage: profile_step --spec FILE [--device cuda] [--warmup N] [--steps N] [--top N]\n"
    "                    [--attention auto|math|fused|cudnn|flash] [--trace FILE.json]\n"
    "                    [--[no-]fused-lm-head] [--[no-]fused-mlp] [--[no-]fused-layernorm]\n"
    "                    [--[no-]fused-qkv] [--[no-]fold-linear-bias] [--[no-]cuda-graph]\n"
    "                    [--[no-]overlap-optimizer] [--[no-]gemm-tuning]\n"
    "                    [--gemm-tune-candidates N] [--[no-]gemm-workspace]\n"
    "                    [--[no-]fused-embedding] [--mlp-gelu auto|epilogue|kernel]\n"
    "Profiles training steps of the job spec (synthetic tokens) and prints the top GPU kernels.\n";

struct Args {
  std::string spec;
  std::string device = "cuda";
  std::string attention = "auto";
  std::string mlp_gelu = "auto";
  std::string trace;
  int warmup = 5;
  int steps = 3;
  int top = 25;
  bool fused_lm_head = true;  // the trainer's defaults
  bool fused_mlp = true;
  bool fused_layernorm = true;
  bool fused_qkv = true;
  bool fused_embedding = true;
  bool fold_linear_bias = true;
  bool cuda_graph = true;
  bool overlap_optimizer = true;
  bool gemm_tuning = true;
  bool gemm_workspace = false;
  int gemm_tune_candidates = mt::kernels::kDefaultGemmTuneCandidates;
};

[[noreturn]] void Die(const std::string& message, int code = 2) {
  std::fprintf(stderr, "profile_step: %s\n", message.c_str());
  std::exit(code);
}

int PositiveInt(const std::string& name, const std::string& v, int max) {
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < 1 || n > max) {
    Die(name + " \"" + v + "\": want an integer in [1, " + std::to_string(max) + "]");
  }
  return n;
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string name = argv[i];
    if (name == "--help" || name == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (name == "--version") {
      std::puts(mt::cli::VersionLine("profile_step").c_str());
      std::exit(0);
    }
    const std::pair<const char*, bool*> switches[] = {
        {"fused-lm-head", &a.fused_lm_head},         {"fused-mlp", &a.fused_mlp},
        {"fused-layernorm", &a.fused_layernorm},     {"fused-qkv", &a.fused_qkv},
        {"fold-linear-bias", &a.fold_linear_bias},   {"cuda-graph", &a.cuda_graph},
        {"overlap-optimizer", &a.overlap_optimizer}, {"gemm-tuning", &a.gemm_tuning},
        {"gemm-workspace", &a.gemm_workspace},       {"fused-embedding", &a.fused_embedding}};
    bool matched = false;
    for (const auto& [suffix, field] : switches) {
      if (name == std::string("--") + suffix || name == std::string("--no-") + suffix) {
        *field = name.rfind("--no-", 0) != 0;
        matched = true;
      }
    }
    if (matched) continue;
    if (i + 1 >= argc) Die("missing value for " + name + "\n" + kUsage);
    const std::string v = argv[++i];
    if (name == "--spec") {
      a.spec = v;
    } else if (name == "--device") {
      a.device = v;
    } else if (name == "--attention") {
      a.attention = v;
    } else if (name == "--mlp-gelu") {
      a.mlp_gelu = v;
    } else if (name == "--trace") {
      a.trace = v;
    } else if (name == "--warmup") {
      a.warmup = PositiveInt(name, v, 1000);
    } else if (name == "--steps") {
      a.steps = PositiveInt(name, v, 100);
    } else if (name == "--top") {
      a.top = PositiveInt(name, v, 1000);
    } else if (name == "--gemm-tune-candidates") {
      a.gemm_tune_candidates = PositiveInt(name, v, mt::kernels::kMaxGemmTuneCandidates);
    } else {
      Die("unknown argument " + name + "\n" + kUsage);
    }
  }
  if (a.spec.empty()) Die(std::string("--spec is required\n") + kUsage);
  return a;
}

[[maybe_unused]] mt::v1::JobSpec LoadSpec(const Args& a, int64_t iterations) {
  absl::StatusOr<std::string> text = mt::ReadFile(a.spec, mt::spec::kMaxYamlSpecBytes);
  if (!text.ok()) Die("--spec " + a.spec + ": " + std::string(text.status().message()));
  absl::StatusOr<mt::spec::ParsedSpec> parsed = mt::spec::ParseYamlSpec(*text);
  if (!parsed.ok()) Die("--spec " + a.spec + ": " + std::string(parsed.status().message()));
  mt::v1::JobSpec job = std::move(parsed->spec);
  job.mutable_training()->set_train_iters(iterations);
  mt::spec::ApplyDefaults(&job);
  const absl::Status resolved = mt::spec::ResolveForLayout(&job, 1);
  if (!resolved.ok()) Die("--spec " + a.spec + ": " + std::string(resolved.message()));
  return job;
}

[[maybe_unused]] void Step(mt::engine::Trainer& trainer) {
  absl::StatusOr<mt::engine::StepMetrics> m = trainer.Step();
  if (!m.ok()) Die("step: " + std::string(m.status().message()), 1);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
#if MT_HAVE_KINETO
  const mt::v1::JobSpec job = LoadSpec(a, a.warmup + 2 * a.steps + 1);
  absl::StatusOr<mt::engine::DataSources> data = mt::engine::SyntheticDataSources(job);
  if (!data.ok()) Die("data: " + std::string(data.status().message()));
  mt::engine::TrainerOptions options;
  options.device = a.device;
  options.attention_backend = a.attention;
  options.log_progress = false;
  options.fused_lm_head = a.fused_lm_head;
  options.fused_mlp = a.fused_mlp;
  options.mlp_gelu = a.mlp_gelu;
  options.fused_layernorm = a.fused_layernorm;
  options.fused_qkv = a.fused_qkv;
  options.fused_embedding = a.fused_embedding;
  options.fold_linear_bias = a.fold_linear_bias;
  options.cuda_graph = a.cuda_graph;
  options.overlap_optimizer = a.overlap_optimizer;
  options.gemm_tuning = a.gemm_tuning;
  options.gemm_tune_candidates = a.gemm_tune_candidates;
  options.gemm_workspace = a.gemm_workspace;
  auto trainer = mt::engine::Trainer::Create(job, options, std::move(data->train), nullptr);
  if (!trainer.ok()) Die("trainer: " + std::string(trainer.status().message()));
  for (int i = 0; i < a.warmup; ++i) Step(**trainer);
  torch::cuda::synchronize();
  // Untimed by the profiler: the plain step time, for the profiler's overhead.
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i) Step(**trainer);
  torch::cuda::synchronize();
  std::printf(
      "step without the profiler: %.2f ms\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
          a.steps);
  // Why the tuning gains what it does: how many of the step's cuBLASLt problems it moved.
  const mt::kernels::GemmTuningCounts tuned = mt::kernels::GemmTuningSoFar();
  std::printf(
      "gemm tuning: %zu cuBLASLt problems timed, %zu moved off the first pick, %zu with the "
      "workspace\n",
      tuned.problems, tuned.moved, tuned.with_workspace);
  const mt::kernels::MlpGeluCounts gelu = mt::kernels::MlpGeluSoFar();
  std::printf("mlp gelu: %zu fc1 shapes timed, %zu run the GELU kernel\n", gelu.shapes,
              gelu.kernel);
  mt::bench::KernelProfileOptions profile;
  profile.units = a.steps;
  profile.unit = "step";
  profile.top = a.top;
  profile.trace = a.trace;
  const bool ran = mt::bench::ProfileKernels(
      [&] {
        for (int i = 0; i < a.steps; ++i) Step(**trainer);
      },
      profile);
  return ran ? 0 : 2;
#else
  (void)a;
  Die(std::string("needs LibTorch >= 2.0 (Kineto); this is ") + TORCH_VERSION);
#endif
}
