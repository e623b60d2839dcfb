// What the kernel micro-benchmarks (fused_mlp_bench, layer_norm_bench, ...) share: their flags
// (--device cuda|cpu|cuda:N, --dtype bf16|fp16|fp32, --steps N, and a bench's own integer
// flags), the engine bench's three sizes as tokens (micro-batch x 1,024) x hidden and their layer
// counts, and the timers (of a call; of a kernel launch that reports its error).
#ifndef MT_BENCH_ENGINE_KERNEL_BENCH_H_
#define MT_BENCH_ENGINE_KERNEL_BENCH_H_

#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

namespace mt::bench {

struct KernelBenchArgs {
  std::string device = "cuda";
  std::string dtype_name = "bf16";
  torch::ScalarType dtype = torch::kBFloat16;
  int steps = 0;
  bool cuda = true;
};

struct KernelBenchSize {
  const char* name;
  int64_t tokens, hidden;
  int layers;
};

inline constexpr KernelBenchSize kKernelBenchSizes[] = {
    {"124m", 32768, 768, 12}, {"350m", 16384, 1024, 24}, {"1.3b", 8192, 2048, 24}};

// A bench's own integer flag: `flag` (with its dashes) in [min, max] into *value, which holds
// the default.
struct KernelBenchIntFlag {
  const char* flag;
  int min, max;
  int* value;
};

// The flags after argv[0] (the common ones with `steps` calls by default, and `extra`); nullopt
// after printing "`name`: the error" and `usage` to stderr.
inline std::optional<KernelBenchArgs> ParseKernelBenchArgs(
    int argc, char** argv, const char* name, const char* usage, int steps,
    std::initializer_list<KernelBenchIntFlag> extra = {}) {
  auto fail = [&](const std::string& message) {
    std::fprintf(stderr, "%s: %s\n%s\n", name, message.c_str(), usage);
    return std::nullopt;
  };
  KernelBenchArgs a;
  a.steps = steps;
  if (argc % 2 == 0) return fail("every flag takes a value");
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--device") {
      a.device = value;
    } else if (flag == "--dtype") {
      a.dtype_name = value;
    } else if (flag == "--steps") {
      a.steps = std::atoi(value.c_str());
    } else {
      const KernelBenchIntFlag* own = nullptr;
      for (const KernelBenchIntFlag& f : extra) {
        if (flag == f.flag) own = &f;
      }
      if (own == nullptr) return fail("unknown argument \"" + flag + "\"");
      *own->value = std::atoi(value.c_str());
      if (*own->value < own->min || *own->value > own->max) {
        return fail(flag + ": want an integer in [" + std::to_string(own->min) + ", " +
                    std::to_string(own->max) + "]");
      }
    }
  }
  if (a.steps < 1 || a.steps > 100000) return fail("--steps: want an integer in [1, 100000]");
  const std::pair<const char*, torch::ScalarType> dtypes[] = {
      {"bf16", torch::kBFloat16}, {"fp16", torch::kHalf}, {"fp32", torch::kFloat}};
  bool known = false;
  for (const auto& [n, t] : dtypes) {
    if (a.dtype_name == n) a.dtype = t, known = true;
  }
  if (!known) return fail("--dtype \"" + a.dtype_name + "\": want bf16, fp16 or fp32");
  a.cuda = a.device.rfind("cuda", 0) == 0;
  if (a.cuda && !torch::cuda::is_available()) return fail("no CUDA device");
  return a;
}

// Milliseconds per call of `run` (three warm-up calls first; the device synchronised around
// the timed calls).
template <typename F>
double TimeMs(F&& run, int steps, bool cuda) {
  for (int i = 0; i < 3; ++i) run();
  if (cuda) torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) run();
  if (cuda) torch::cuda::synchronize();
  const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - t0;
  return ms.count() / steps;
}

// TimeMs on CUDA of `launch`, a kernel launch that returns its cudaError_t: ms per call, or -1
// after printing "`name`: launch: the error" on stderr when a call failed.
template <typename F>
double TimeLaunchMs(const char* name, F&& launch, int steps) {
  cudaError_t err = cudaSuccess;
  const double ms = TimeMs(
      [&] {
        const cudaError_t e = launch();
        if (e != cudaSuccess) err = e;
      },
      steps, true);
  if (err == cudaSuccess) return ms;
  std::fprintf(stderr, "%s: launch: %s\n", name, cudaGetErrorString(err));
  return -1;
}

}  // namespace mt::bench

#endif  // MT_BENCH_ENGINE_KERNEL_BENCH_H_
