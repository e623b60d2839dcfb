// layer_norm_bench: the pre-LayerNorm block's `sum = x + residual; y = LayerNorm(sum)` through
// LibTorch's chain (an add and torch::layer_norm: what mt runs without --fused-layernorm) and
// through kernels::FusedAddLayerNorm, at the engine bench's three sizes (tokens = micro-batch x
// 1,024), forward alone (no autograd) and forward + backward (both outputs' gradients), in the
// same run on the same GPU. Prints ms per call and the ratio to the chain (> 1: faster).
//
//   layer_norm_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "common/cli/help_version.h"
#include "worker/kernels/layer_norm.h"

namespace {

constexpr char kUsage[] =
    "usage: layer_norm_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]\n"
    "Times x + residual and LayerNorm: LibTorch's chain against kernels::FusedAddLayerNorm.";

struct Size {
  const char* name;
  int64_t tokens, hidden;
};

// Milliseconds per call of `run` (warm-up first; the device synchronised around the timed
// calls).
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

int Fail(const std::string& message) {
  std::fprintf(stderr, "layer_norm_bench: %s\n%s\n", message.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "layer_norm_bench", kUsage)) return 0;
  std::string device = "cuda", dtype_name = "bf16";
  int steps = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i], value = argv[i + 1];
    if (name == "--device") {
      device = value;
    } else if (name == "--dtype") {
      dtype_name = value;
    } else if (name == "--steps") {
      steps = std::atoi(value.c_str());
    } else {
      return Fail("unknown argument \"" + name + "\"");
    }
  }
  if (argc % 2 == 0) return Fail("every flag takes a value");
  if (steps < 1 || steps > 100000) return Fail("--steps: want an integer in [1, 100000]");
  const std::pair<const char*, torch::ScalarType> dtypes[] = {
      {"bf16", torch::kBFloat16}, {"fp16", torch::kHalf}, {"fp32", torch::kFloat}};
  torch::ScalarType dtype = torch::kBFloat16;
  bool known = false;
  for (const auto& [n, t] : dtypes) {
    if (dtype_name == n) dtype = t, known = true;
  }
  if (!known) return Fail("--dtype \"" + dtype_name + "\": want bf16, fp16 or fp32");
  const bool cuda = device.rfind("cuda", 0) == 0;
  if (cuda && !torch::cuda::is_available()) return Fail("no CUDA device");
  const auto options = torch::TensorOptions().device(torch::Device(device)).dtype(dtype);
  const Size sizes[] = {{"124m", 32768, 768}, {"350m", 16384, 1024}, {"1.3b", 8192, 2048}};
  std::printf("layer_norm_bench: %s %s, %d steps; ms per call (ratio to the chain)\n",
              device.c_str(), dtype_name.c_str(), steps);
  std::printf("%-5s %7s %6s | %8s %16s | %8s %16s\n", "size", "tokens", "hidden", "fwd chain",
              "fwd fused", "f+b chain", "f+b fused");
  torch::manual_seed(1);
  const double eps = 1e-5;
  for (const Size& s : sizes) {
    torch::Tensor x = torch::randn({s.tokens, s.hidden}, options).requires_grad_(true);
    torch::Tensor r = torch::randn({s.tokens, s.hidden}, options).requires_grad_(true);
    torch::Tensor w = (torch::rand({s.hidden}, options) + 0.5).requires_grad_(true);
    torch::Tensor b = (torch::randn({s.hidden}, options) * 0.1).requires_grad_(true);
    const torch::Tensor dy = torch::randn({s.tokens, s.hidden}, options);
    const torch::Tensor dsum = torch::randn({s.tokens, s.hidden}, options);
    auto chain = [&] {
      torch::Tensor sum = x + r;
      return std::make_pair(sum, torch::layer_norm(sum, {s.hidden}, w, b, eps));
    };
    auto fused = [&] { return mt::kernels::FusedAddLayerNorm(x, r, w, b, eps); };
    auto forward = [&](auto f) {
      return TimeMs(
          [&] {
            torch::NoGradGuard no_grad;
            f();
          },
          steps, cuda);
    };
    auto both = [&](auto f) {
      return TimeMs(
          [&] {
            auto [sum, y] = f();
            torch::autograd::backward({sum, y}, {dsum, dy});
          },
          steps, cuda);
    };
    const double fc = forward(chain), ff = forward(fused);
    const double bc = both(chain), bf = both(fused);
    std::printf("%-5s %7ld %6ld | %8.3f %8.3f (%.2fx) | %8.3f %8.3f (%.2fx)\n", s.name,
                static_cast<long>(s.tokens), static_cast<long>(s.hidden), fc, ff, fc / ff, bc, bf,
                bc / bf);
  }
  return 0;
}
