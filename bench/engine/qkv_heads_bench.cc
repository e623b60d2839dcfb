// qkv_heads_bench: the attention's QKV projection, forward + backward, through the chain mt runs
// without --fused-qkv (kernels::LinearWithBias, then LibTorch's view, split and transposes, whose
// backward concatenates dq, dk and dv before ColumnSum reads the result again) and through
// kernels::QkvHeads (one gather kernel that also makes the bias gradient's first pass), at the
// engine bench's three sizes (tokens = micro-batch x 1,024; heads of 64 at 124M and 350M, 128 at
// 1.3B), in the same run on the same GPU. The incoming dq, dk and dv are contiguous [b, heads,
// s, d], as the attention's backward gives them. Prints ms per forward + backward and the ratio
// to the chain (> 1: faster).
//
//   qkv_heads_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]
#include <torch/torch.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/engine/kernel_bench.h"
#include "common/cli/help_version.h"
#include "worker/kernels/column_sum.h"
#include "worker/kernels/qkv_heads.h"

namespace {

constexpr char kUsage[] =
    "usage: qkv_heads_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]\n"
    "Times the QKV projection's forward + backward: the split chain against kernels::QkvHeads.";

constexpr int64_t kSeq = 1024;

}  // namespace

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "qkv_heads_bench", kUsage)) return 0;
  const std::optional<mt::bench::KernelBenchArgs> args =
      mt::bench::ParseKernelBenchArgs(argc, argv, "qkv_heads_bench", kUsage, 50);
  if (!args.has_value()) return 2;
  const auto options =
      torch::TensorOptions().device(torch::Device(args->device)).dtype(args->dtype);
  std::printf("qkv_heads_bench: %s %s, %d steps; ms per forward + backward (ratio to the chain)\n",
              args->device.c_str(), args->dtype_name.c_str(), args->steps);
  std::printf("%-5s %7s %6s %5s | %8s %16s\n", "size", "tokens", "hidden", "heads", "chain",
              "QkvHeads");
  torch::manual_seed(1);
  for (const mt::bench::KernelBenchSize& s : mt::bench::kKernelBenchSizes) {
    const int64_t d = s.hidden >= 2048 ? 128 : 64, heads = s.hidden / d, b = s.tokens / kSeq;
    torch::Tensor x = torch::randn({b, kSeq, s.hidden}, options).requires_grad_(true);
    torch::Tensor w = (torch::randn({3 * s.hidden, s.hidden}, options) * 0.02).requires_grad_(true);
    torch::Tensor bias = (torch::randn({3 * s.hidden}, options) * 0.1).requires_grad_(true);
    std::vector<torch::Tensor> dqkv;
    for (int p = 0; p < 3; ++p) dqkv.push_back(torch::randn({b, heads, kSeq, d}, options));
    auto chain = [&] {
      std::vector<torch::Tensor> qkv =
          mt::kernels::LinearWithBias(x.view({s.tokens, s.hidden}), w, bias)
              .view({b, kSeq, heads, 3 * d})
              .split(d, -1);
      for (torch::Tensor& t : qkv) t = t.transpose(1, 2);
      return qkv;
    };
    auto fused = [&] { return mt::kernels::QkvHeads(x, w, bias, heads, d); };
    auto time = [&](auto f) {
      return mt::bench::TimeMs([&] { torch::autograd::backward(f(), dqkv); }, args->steps,
                               args->cuda);
    };
    const double c = time(chain), f = time(fused);
    std::printf("%-5s %7ld %6ld %5ld | %8.3f %8.3f (%.2fx)\n", s.name, static_cast<long>(s.tokens),
                static_cast<long>(s.hidden), static_cast<long>(heads), c, f, c / f);
  }
  return 0;
}
