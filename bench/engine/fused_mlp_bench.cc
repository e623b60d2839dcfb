// fused_mlp_bench: the transformer MLP, fc2(gelu(fc1(x))), forward and backward, through
// LibTorch's unfused chain (addmm, gelu, addmm: what mt ran before kernels::FusedMlp) and through
// kernels::FusedMlp with each of its backward modes, at the engine bench's three sizes (tokens
// = micro-batch x 1,024), in the same run on the same GPU. Prints ms per forward + backward and
// the ratio to the chain (> 1: faster than the chain).
//
//   fused_mlp_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "common/cli/help_version.h"
#include "worker/kernels/fused_mlp.h"

namespace {

constexpr char kUsage[] =
    "usage: fused_mlp_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]\n"
    "Times the MLP's forward + backward: LibTorch's chain against kernels::FusedMlp's modes.";

struct Size {
  const char* name;
  int64_t tokens, hidden;
};

using mt::kernels::MlpBackward;

// Milliseconds per forward + backward of `run` (warm-up first; the device synchronised around
// the timed steps).
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
  std::fprintf(stderr, "fused_mlp_bench: %s\n%s\n", message.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "fused_mlp_bench", kUsage)) return 0;
  std::string device = "cuda", dtype_name = "bf16";
  int steps = 20;
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
  if (steps < 1 || steps > 10000) return Fail("--steps: want an integer in [1, 10000]");
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
  const std::pair<const char*, MlpBackward> modes[] = {
      {"dgelu+bgrad", MlpBackward::kDGeluBGrad},
      {"dgelu", MlpBackward::kDGelu},
      {"fwd-only", MlpBackward::kUnfused},
      {"dgelu+wgrad-bias", MlpBackward::kDGeluWGradBias}};
  std::printf("fused_mlp_bench: %s %s, %d steps; ms per forward + backward (ratio to the chain)\n",
              device.c_str(), dtype_name.c_str(), steps);
  std::printf("%-5s %7s %6s | %8s | %16s %16s %16s %16s\n", "size", "tokens", "hidden", "chain",
              modes[0].first, modes[1].first, modes[2].first, modes[3].first);
  torch::manual_seed(1);
  for (const Size& s : sizes) {
    const int64_t f = 4 * s.hidden;
    auto param = [&](std::vector<int64_t> shape) {
      return (torch::randn(shape, options) * 0.02).requires_grad_(true);
    };
    torch::Tensor x = torch::randn({s.tokens, s.hidden}, options).requires_grad_(true);
    torch::Tensor w1 = param({f, s.hidden}), b1 = param({f}), w2 = param({s.hidden, f}),
                  b2 = param({s.hidden});
    const torch::Tensor dy = torch::randn({s.tokens, s.hidden}, options);
    const double chain = TimeMs(
        [&] {
          torch::addmm(b2, torch::gelu(torch::addmm(b1, x, w1.t()), "tanh"), w2.t()).backward(dy);
        },
        steps, cuda);
    std::printf("%-5s %7ld %6ld | %8.3f |", s.name, static_cast<long>(s.tokens),
                static_cast<long>(s.hidden), chain);
    for (const auto& [name, mode] : modes) {
      mt::kernels::FusedMlpOptions o;
      o.backward = mode;
      const double ms =
          TimeMs([&] { mt::kernels::FusedMlp(x, w1, b1, w2, b2, o).backward(dy); }, steps, cuda);
      std::printf(" %8.3f (%.2fx)", ms, chain / ms);
    }
    std::printf("\n");
  }
  return 0;
}
