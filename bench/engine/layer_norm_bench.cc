// layer_norm_bench: the pre-LayerNorm block's `sum = x + residual; y = LayerNorm(sum)` through
// LibTorch's chain (an add and torch::layer_norm: what mt runs without --fused-layernorm) and
// through kernels::FusedAddLayerNorm, at the engine bench's three sizes (tokens = micro-batch x
// 1,024), forward alone (no autograd) and forward + backward (both outputs' gradients), in the
// same run on the same GPU. Prints ms per call and the ratio to the chain (> 1: faster).
//
//   layer_norm_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]
#include <torch/torch.h>

#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "bench/engine/kernel_bench.h"
#include "common/cli/help_version.h"
#include "worker/kernels/layer_norm.h"

namespace {

constexpr char kUsage[] =
    "usage: layer_norm_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]\n"
    "Times x + residual and LayerNorm: LibTorch's chain against kernels::FusedAddLayerNorm.";

}  // namespace

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "layer_norm_bench", kUsage)) return 0;
  const std::optional<mt::bench::KernelBenchArgs> args =
      mt::bench::ParseKernelBenchArgs(argc, argv, "layer_norm_bench", kUsage, 50);
  if (!args.has_value()) return 2;
  const std::string& device = args->device;
  const int steps = args->steps;
  const bool cuda = args->cuda;
  const auto options = torch::TensorOptions().device(torch::Device(device)).dtype(args->dtype);
  std::printf("layer_norm_bench: %s %s, %d steps; ms per call (ratio to the chain)\n",
              device.c_str(), args->dtype_name.c_str(), steps);
  std::printf("%-5s %7s %6s | %8s %16s | %8s %16s\n", "size", "tokens", "hidden", "fwd chain",
              "fwd fused", "f+b chain", "f+b fused");
  torch::manual_seed(1);
  const double eps = 1e-5;
  for (const mt::bench::KernelBenchSize& s : mt::bench::kKernelBenchSizes) {
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
      return mt::bench::TimeMs(
          [&] {
            torch::NoGradGuard no_grad;
            f();
          },
          steps, cuda);
    };
    auto both = [&](auto f) {
      return mt::bench::TimeMs(
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
