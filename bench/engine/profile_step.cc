// profile_step: where one training step of our trainer spends its GPU time. Builds the trainer
// from a job spec (bench/engine's generated specs: `bench_engine.py` writes them under
// $OUT/bench-engine/specs/), runs warm-up steps, then profiles a few steps with LibTorch's
// Kineto profiler and prints, on stdout, the step's wall time, the GPU's busy time and the top
// kernels by total time (name, calls per step, ms per step, share of the busy time).
//
//   profile_step --spec FILE [--device cuda] [--warmup 5] [--steps 3] [--top 25]
//                [--attention auto|math|fused|cudnn|flash] [--trace FILE.json]
//                [--[no-]fused-lm-head] [--[no-]fused-mlp] [--[no-]fused-layernorm]
//
// Needs a CUDA LibTorch >= 2.0 (Kineto); elsewhere it says so and exits 2.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/base/files.h"
#include "common/cli/help_version.h"
#include "common/spec/defaults.h"
#include "common/spec/yaml_spec.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/engine/data_sources.h"
#include "worker/engine/trainer.h"

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#define MT_HAVE_KINETO 1
#else
#define MT_HAVE_KINETO 0
#endif

namespace {

constexpr char kUsage[] =
    "usage: profile_step --spec FILE [--device cuda] [--warmup N] [--steps N] [--top N]\n"
    "                    [--attention auto|math|fused|cudnn|flash] [--trace FILE.json]\n"
    "                    [--[no-]fused-lm-head] [--[no-]fused-mlp] [--[no-]fused-layernorm]\n"
    "Profiles training steps of the job spec (synthetic tokens) and prints the top GPU kernels.\n";

struct Args {
  std::string spec;
  std::string device = "cuda";
  std::string attention = "auto";
  std::string trace;
  int warmup = 5;
  int steps = 3;
  int top = 25;
  bool fused_lm_head = true;  // the trainer's defaults
  bool fused_mlp = true;
  bool fused_layernorm = false;
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
    const std::pair<const char*, bool*> switches[] = {{"fused-lm-head", &a.fused_lm_head},
                                                      {"fused-mlp", &a.fused_mlp},
                                                      {"fused-layernorm", &a.fused_layernorm}};
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
    } else if (name == "--trace") {
      a.trace = v;
    } else if (name == "--warmup") {
      a.warmup = PositiveInt(name, v, 1000);
    } else if (name == "--steps") {
      a.steps = PositiveInt(name, v, 100);
    } else if (name == "--top") {
      a.top = PositiveInt(name, v, 1000);
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

#if MT_HAVE_KINETO
struct KernelTotal {
  double ns = 0;
  int64_t calls = 0;
};

void PrintTop(const std::map<std::string, KernelTotal>& totals, double busy_ns, int steps,
              int top) {
  std::vector<std::pair<std::string, KernelTotal>> rows(totals.begin(), totals.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::printf("%8s %6s %6s  %s\n", "ms/step", "share", "calls", "kernel");
  for (int i = 0; i < top && i < static_cast<int>(rows.size()); ++i) {
    const KernelTotal& k = rows[i].second;
    std::string name = rows[i].first;
    if (name.size() > 140) name = name.substr(0, 137) + "...";
    std::printf("%8.3f %5.1f%% %6.1f  %s\n", k.ns / 1e6 / steps, 100.0 * k.ns / busy_ns,
                static_cast<double>(k.calls) / steps, name.c_str());
  }
}

void Profile(mt::engine::Trainer& trainer, const Args& a) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i) Step(trainer);
  torch::cuda::synchronize();
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  std::map<std::string, KernelTotal> totals;
  double busy_ns = 0;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    KernelTotal& k = totals[std::string(e.name())];
    k.ns += static_cast<double>(e.durationNs());
    k.calls += 1;
    busy_ns += static_cast<double>(e.durationNs());
  }
  std::printf("steps profiled: %d; wall %.2f ms/step; GPU busy %.2f ms/step (%.1f%%)\n", a.steps,
              wall_ms / a.steps, busy_ns / 1e6 / a.steps, 100.0 * busy_ns / 1e6 / wall_ms);
  PrintTop(totals, busy_ns, a.steps, a.top);
  if (!a.trace.empty()) result->save(a.trace);
}
#endif

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
  options.fused_layernorm = a.fused_layernorm;
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
  Profile(**trainer, a);
  return 0;
#else
  (void)a;
  Die(std::string("needs LibTorch >= 2.0 (Kineto); this is ") + TORCH_VERSION);
#endif
}
