// decode_bench: time to first token and decode speed of worker/generate on one device, greedy,
// on a GPT-2 shape with random weights (the speed does not depend on the values).
//
//   decode_bench [--size 124m|350m|1.3b] [--device cuda] [--dtype bf16|fp16|fp32]
//                [--batches 1,16] [--prompt 128] [--new 128] [--repeat 3] [--no-cuda-graph]
//                [--quantize none|int8] [--no-read-ahead] [--no-norm-in-linear]
//                [--no-greedy-in-step] [--profile [--top N]]
//
// One line per batch size on stdout (key=value): ms per decode step and tokens/s of the decode
// steps alone, time to first token (prefill), and the whole generation per new token (what
// hf_generate.py measures of transformers); the best of --repeat runs after a warm-up, through
// one Generator (the warm-up captures the CUDA graph, the timed runs replay it). On CUDA both
// decode paths run: the line's main figures are the CUDA graph's (Generate's default), and
// eager_ms_per_token / graph_ms_per_token / graph_speedup compare the decode step without and
// with the graph (capture_ms: the warm-up's capture). --no-cuda-graph runs the eager path
// only (its figures are then the main ones; graph_ms_per_token=nan). --quantize int8: the
// layers' linear weights as int8 (worker/model/quantize.h); weights_mib is what the model's
// tensors hold either way, kv_cache_mib the cache of the batch, and peak_mib the most the CUDA
// allocator held for tensors during the main path's generations (the weights, the cache, the
// prefill's activations, the graph's pool; nan off CUDA). --no-read-ahead,
// --no-norm-in-linear and --no-greedy-in-step turn off the decode loop's read-ahead
// (GenerateOptions::read_ahead), the LayerNorm inside the linear layers and the greedy token
// chosen inside the step (DecodeStepOptions), to compare each against the default in one lease
// (bench/RESULTS.md, 2026-12-03 and 12-04). --profile: after the timings, one more
// generation of the first batch size eagerly and one through the graph under LibTorch's profiler,
// each printing the GPU busy time per new token and the top kernels
// (bench/profile/kernel_profile.h).
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/profile/kernel_profile.h"
#include "common/cli/help_version.h"
#include "worker/generate/decode_graph.h"
#include "worker/generate/generator.h"
#include "worker/model/gpt.h"
#include "worker/model/quantize.h"

#if MT_BENCH_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace {

struct Args {
  std::string size = "124m";
  std::string device = "cuda";
  std::string dtype = "bf16";
  std::vector<int64_t> batches = {1, 16};
  int64_t prompt = 128;
  int64_t new_tokens = 128;
  int repeat = 3;
  bool cuda_graph = true;  // also measure the CUDA graph path (CUDA only)
  std::string quantize = "none";
  bool profile = false;
  int top = 25;
  bool read_ahead = true;      // --no-read-ahead: GenerateOptions::read_ahead = false
  bool norm_in_linear = true;  // --no-norm-in-linear: DecodeStepOptions::norm_in_linear = false
  bool greedy_in_step = true;  // --no-greedy-in-step: DecodeStepOptions::greedy_in_step = false
};

// Best figures of --repeat timed runs, in seconds (step: per decode step).
struct Timing {
  double step = std::numeric_limits<double>::quiet_NaN();
  double ttft = 1e30;
  double total = 1e30;
  double capture = 0.0;
  double kv_cache_mib = 0.0;
  double peak_mib = std::numeric_limits<double>::quiet_NaN();
};

// The CUDA allocator's peak of allocated bytes on `device` since the last call, in MiB (nan
// off CUDA); starts a new peak.
double TakePeakMib(const torch::Device& device) {
#if MT_BENCH_WITH_CUDA
  if (device.is_cuda()) {
    namespace alloc = c10::cuda::CUDACachingAllocator;
    const c10::DeviceIndex index = device.index() < 0 ? 0 : device.index();
    const double peak = static_cast<double>(alloc::getDeviceStats(index).allocated_bytes[0].peak);
    alloc::resetPeakStats(index);
    return peak / (1 << 20);
  }
#endif
  (void)device;
  return std::numeric_limits<double>::quiet_NaN();
}

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--no-cuda-graph") {
      a->cuda_graph = false;
      continue;
    }
    if (k == "--profile") {
      a->profile = true;
      continue;
    }
    if (k == "--no-read-ahead") {
      a->read_ahead = false;
      continue;
    }
    if (k == "--no-norm-in-linear") {
      a->norm_in_linear = false;
      continue;
    }
    if (k == "--no-greedy-in-step") {
      a->greedy_in_step = false;
      continue;
    }
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    if (k == "--size") {
      a->size = v;
    } else if (k == "--device") {
      a->device = v;
    } else if (k == "--dtype") {
      a->dtype = v;
    } else if (k == "--quantize") {
      if (v != "none" && v != "int8") return false;
      a->quantize = v;
    } else if (k == "--batches") {
      a->batches.clear();
      for (absl::string_view b : absl::StrSplit(v, ',')) {
        int64_t n = 0;
        if (!absl::SimpleAtoi(b, &n) || n < 1) return false;
        a->batches.push_back(n);
      }
    } else if (k == "--prompt") {
      if (!absl::SimpleAtoi(v, &a->prompt) || a->prompt < 1) return false;
    } else if (k == "--new") {
      if (!absl::SimpleAtoi(v, &a->new_tokens) || a->new_tokens < 1) return false;
    } else if (k == "--top") {
      if (!absl::SimpleAtoi(v, &a->top) || a->top < 1) return false;
    } else if (k == "--repeat") {
      if (!absl::SimpleAtoi(v, &a->repeat) || a->repeat < 1) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool ConfigFor(const std::string& size, mt::model::GptConfig* c) {
  if (size == "124m") {
    *c = {};
    c->num_layers = 12, c->hidden_size = 768, c->num_attention_heads = 12;
  } else if (size == "350m") {
    c->num_layers = 24, c->hidden_size = 1024, c->num_attention_heads = 16;
  } else if (size == "1.3b") {
    c->num_layers = 24, c->hidden_size = 2048, c->num_attention_heads = 16;
  } else {
    return false;
  }
  c->seq_length = 1024;
  c->vocab_size = 50257;
  c->hidden_dropout = 0.0;
  c->attention_dropout = 0.0;
  c->Resolve();
  return true;
}

mt::generate::GenerateOptions GreedyOptions(const Args& a, int64_t batch, bool cuda_graph) {
  mt::generate::GenerateOptions o;
  o.max_new_tokens = a.new_tokens;
  o.num_samples = batch;
  o.sampling.temperature = 0.0;
  o.cuda_graph = cuda_graph;
  o.read_ahead = a.read_ahead;
  o.step.norm_in_linear = a.norm_in_linear;
  o.step.greedy_in_step = a.greedy_in_step;
  return o;
}

std::string NoText(absl::Span<const int32_t>) { return std::string(); }

// One warm-up generation (it captures the graph), then one under the profiler.
bool Profile(mt::model::GptModel& gpt, const std::vector<int32_t>& prompt, const Args& a,
             int64_t batch, bool cuda_graph) {
  const mt::generate::GenerateOptions o = GreedyOptions(a, batch, cuda_graph);
  mt::generate::Generator generator(gpt);
  if (!generator.Generate(prompt, o, NoText).ok()) return false;
  std::printf("profile: %s decode, batch %lld, prompt %lld (its prefill included)\n",
              cuda_graph ? "CUDA graph" : "eager", static_cast<long long>(batch),
              static_cast<long long>(a.prompt));
  mt::bench::KernelProfileOptions p;
  p.units = static_cast<int>(a.new_tokens);
  p.unit = "token";
  p.top = a.top;
  bool ok = true;
  mt::bench::ProfileKernels([&] { ok = generator.Generate(prompt, o, NoText).ok(); }, p);
  return ok;
}

// Runs --repeat + 1 generations (the first warms up and captures) through one Generator.
bool Measure(mt::model::GptModel& gpt, const std::vector<int32_t>& prompt, const Args& a,
             int64_t batch, bool cuda_graph, Timing* t) {
  const mt::generate::GenerateOptions o = GreedyOptions(a, batch, cuda_graph);
  const torch::Device device = gpt.output_weight().device();
  TakePeakMib(device);  // a new peak from here (the weights are allocated already)
  mt::generate::Generator generator(gpt);
  const double steps = static_cast<double>(a.new_tokens - 1);
  double best_step = 1e30;
  for (int r = 0; r <= a.repeat; ++r) {  // r = 0 warms up
    auto result = generator.Generate(prompt, o, NoText);
    if (!result.ok()) {
      std::fprintf(stderr, "decode_bench: %s\n", std::string(result.status().message()).c_str());
      return false;
    }
    t->kv_cache_mib = static_cast<double>(result->kv_cache_bytes) / (1 << 20);
    if (r == 0) {
      t->capture = result->graph_capture_seconds;
      continue;
    }
    if (steps > 0) best_step = std::min(best_step, result->decode_seconds / steps);
    t->ttft = std::min(t->ttft, result->prefill_seconds);
    t->total = std::min(t->total, result->prefill_seconds + result->decode_seconds);
  }
  // One new token has no decode step: its step figures are nan.
  t->step = steps > 0 ? best_step : std::numeric_limits<double>::quiet_NaN();
  t->peak_mib = TakePeakMib(device);
  return true;
}

void Print(const Args& a, int64_t batch, double weights_mib, const Timing& main,
           const Timing& eager, const Timing& graph) {
  const double b = static_cast<double>(batch);
  std::printf(
      "mt size=%s dtype=%s quantize=%s read_ahead=%d norm_in_linear=%d greedy_in_step=%d "
      "weights_mib=%.0f "
      "batch=%lld prompt=%lld new=%lld "
      "ms_per_token=%.3f tokens_per_s=%.1f ttft_ms=%.2f total_ms_per_token=%.3f "
      "total_tokens_per_s=%.1f eager_ms_per_token=%.3f graph_ms_per_token=%.3f "
      "graph_speedup=%.2f capture_ms=%.1f kv_cache_mib=%.1f peak_mib=%.0f\n",
      a.size.c_str(), a.dtype.c_str(), a.quantize.c_str(), a.read_ahead ? 1 : 0,
      a.norm_in_linear ? 1 : 0, a.greedy_in_step ? 1 : 0, weights_mib,
      static_cast<long long>(batch), static_cast<long long>(a.prompt),
      static_cast<long long>(a.new_tokens), main.step * 1e3, b / main.step, main.ttft * 1e3,
      main.total * 1e3 / static_cast<double>(a.new_tokens),
      b * static_cast<double>(a.new_tokens) / main.total, eager.step * 1e3, graph.step * 1e3,
      eager.step / graph.step, graph.capture * 1e3, main.kv_cache_mib, main.peak_mib);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  mt::model::GptConfig config;
  if (mt::cli::AnswerHelpOrVersion(
          argc, argv, "decode_bench",
          "usage: decode_bench [--size 124m|350m|1.3b] [--device cuda] [--dtype bf16|fp16|fp32] "
          "[--batches 1,16] [--prompt 128] [--new 128] [--repeat 3] [--no-cuda-graph] "
          "[--quantize none|int8] [--no-read-ahead] [--no-norm-in-linear] "
          "[--no-greedy-in-step] [--profile [--top N]]")) {
    return 0;
  }
  if (!Parse(argc, argv, &a) || !ConfigFor(a.size, &config)) {
    std::fprintf(stderr, "decode_bench: bad arguments (see --help)\n");
    return 2;
  }
  mt::model::ModelBuildOptions build;
  build.seed = 1;
  build.device = torch::Device(a.device);
  build.dtype = a.dtype == "bf16"   ? torch::kBFloat16
                : a.dtype == "fp16" ? torch::kHalf
                                    : torch::kFloat;
  auto model = mt::model::GptModel::Create(config, {}, build);
  if (!model.ok()) {
    std::fprintf(stderr, "decode_bench: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  if (a.quantize == "int8") {
    if (const absl::Status q = mt::model::QuantizeInt8Linears(**model); !q.ok()) {
      std::fprintf(stderr, "decode_bench: %s\n", std::string(q.message()).c_str());
      return 1;
    }
  }
  const double weights_mib = static_cast<double>(mt::model::ModelBytes(**model)) / (1 << 20);
  std::vector<int32_t> prompt(static_cast<size_t>(a.prompt));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919) % 50257);
  // One new token has no decode step: nothing for a graph to replay.
  const bool graph = a.cuda_graph && build.device.is_cuda() &&
                     mt::generate::DecodeGraph::Available() && a.new_tokens >= 2;
  for (int64_t batch : a.batches) {
    Timing eager, replayed;
    if (!Measure(**model, prompt, a, batch, /*cuda_graph=*/false, &eager)) return 1;
    if (graph && !Measure(**model, prompt, a, batch, /*cuda_graph=*/true, &replayed)) return 1;
    Print(a, batch, weights_mib, graph ? replayed : eager, eager, replayed);
  }
  if (a.profile && (!Profile(**model, prompt, a, a.batches.front(), /*cuda_graph=*/false) ||
                    (graph && !Profile(**model, prompt, a, a.batches.front(), true)))) {
    std::fprintf(stderr, "decode_bench: a profiled generation failed\n");
    return 1;
  }
  return 0;
}
