// fused_mlp_bench: the transformer MLP, fc2(gelu(fc1(x))), forward and backward, through
// LibTorch's unfused chain (addmm, gelu, addmm: what mt ran before kernels::FusedMlp) and through
// kernels::FusedMlp with each of its backward modes, at the engine bench's three sizes (tokens
// = micro-batch x 1,024), in the same run on the same GPU. Prints ms per forward + backward and
// the ratio to the chain (> 1: faster than the chain).
//
//   fused_mlp_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]
#include <torch/torch.h>

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/engine/kernel_bench.h"
#include "common/cli/help_version.h"
#include "worker/kernels/fused_mlp.h"

namespace {

constexpr char kUsage[] =
    "usage: fused_mlp_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]\n"
    "Times the MLP's forward + backward: LibTorch's chain against kernels::FusedMlp's modes.";

using mt::kernels::MlpBackward;

}  // namespace

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "fused_mlp_bench", kUsage)) return 0;
  const std::optional<mt::bench::KernelBenchArgs> args =
      mt::bench::ParseKernelBenchArgs(argc, argv, "fused_mlp_bench", kUsage, 20);
  if (!args.has_value()) return 2;
  const std::string& device = args->device;
  const int steps = args->steps;
  const bool cuda = args->cuda;
  const auto options = torch::TensorOptions().device(torch::Device(device)).dtype(args->dtype);
  const std::pair<const char*, MlpBackward> modes[] = {
      {"dgelu+bgrad", MlpBackward::kDGeluBGrad},
      {"dgelu", MlpBackward::kDGelu},
      {"fwd-only", MlpBackward::kUnfused},
      {"dgelu+wgrad-bias", MlpBackward::kDGeluWGradBias}};
  std::printf("fused_mlp_bench: %s %s, %d steps; ms per forward + backward (ratio to the chain)\n",
              device.c_str(), args->dtype_name.c_str(), steps);
  std::printf("%-5s %7s %6s | %8s | %16s %16s %16s %16s\n", "size", "tokens", "hidden", "chain",
              modes[0].first, modes[1].first, modes[2].first, modes[3].first);
  torch::manual_seed(1);
  for (const mt::bench::KernelBenchSize& s : mt::bench::kKernelBenchSizes) {
    const int64_t f = 4 * s.hidden;
    auto param = [&](std::vector<int64_t> shape) {
      return (torch::randn(shape, options) * 0.02).requires_grad_(true);
    };
    torch::Tensor x = torch::randn({s.tokens, s.hidden}, options).requires_grad_(true);
    torch::Tensor w1 = param({f, s.hidden}), b1 = param({f}), w2 = param({s.hidden, f}),
                  b2 = param({s.hidden});
    const torch::Tensor dy = torch::randn({s.tokens, s.hidden}, options);
    const double chain = mt::bench::TimeMs(
        [&] {
          torch::addmm(b2, torch::gelu(torch::addmm(b1, x, w1.t()), "tanh"), w2.t()).backward(dy);
        },
        steps, cuda);
    std::printf("%-5s %7ld %6ld | %8.3f |", s.name, static_cast<long>(s.tokens),
                static_cast<long>(s.hidden), chain);
    for (const auto& [name, mode] : modes) {
      mt::kernels::FusedMlpOptions o;
      o.backward = mode;
      const double ms = mt::bench::TimeMs(
          [&] { mt::kernels::FusedMlp(x, w1, b1, w2, b2, o).backward(dy); }, steps, cuda);
      std::printf(" %8.3f (%.2fx)", ms, chain / ms);
    }
    std::printf("\n");
  }
  return 0;
}
