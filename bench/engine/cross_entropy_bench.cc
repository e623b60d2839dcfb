// cross_entropy_bench: the language-model head's loss over the engine bench's three sizes' logits
// (tokens = micro-batch x 1,024 rows of GPT-2's padded 50,304), in the same run on the same GPU:
//   - the chain mt runs without the fused kernel (cross_entropy on the logits upcast to fp32,
//     then its backward into the logits), forward + backward;
//   - the fused kernel (kernels::LaunchFusedCrossEntropy: the loss and the gradient written over
//     the logits) on each of its paths: the two-pass kernel (the row read twice) and the staged
//     one (the row copied into shared memory and read from memory once).
// Prints ms per call, the kernels' rate (the logits read once and written once), and the ratios:
// each kernel's speed-up over the chain, and the staged kernel's over the two-pass one. The
// kernels run in place, so every call after the first takes the previous call's gradient as
// its logits: the same work (a max, a sum of exponentials and a gradient a row), other values.
//
//   cross_entropy_bench [--device cuda] [--dtype bf16|fp32] [--steps N]
#include <ATen/cuda/CUDAContext.h>
#include <torch/torch.h>

#include <cstdio>
#include <optional>
#include <string>

#include "bench/engine/kernel_bench.h"
#include "common/cli/help_version.h"
#include "worker/kernels/cross_entropy_launch.h"
#include "worker/kernels/kind_of.h"

namespace {

constexpr char kUsage[] =
    "usage: cross_entropy_bench [--device cuda] [--dtype bf16|fp32] [--steps N]\n"
    "Times the LM head's loss over GPT-2 logits: LibTorch's fp32 chain against the fused\n"
    "kernel's two paths (two-pass, staged in shared memory).";

constexpr int64_t kVocab = 50304;

// The fused kernel on `path` over `logits` in place: ms per call; negative after printing the
// launch's error.
double KernelMs(mt::kernels::CrossEntropyPath path, torch::Tensor& logits,
                const torch::Tensor& targets, int steps) {
  torch::Tensor losses = torch::empty({logits.size(0)}, logits.options().dtype(torch::kFloat));
  return mt::bench::TimeLaunchMs(
      "cross_entropy_bench",
      [&] {
        return mt::kernels::LaunchFusedCrossEntropy(
            mt::kernels::KindOf(logits.scalar_type()), logits.data_ptr(),
            targets.data_ptr<int64_t>(), losses.data_ptr<float>(), logits.size(0), logits.size(1),
            1.0f / static_cast<float>(logits.size(0)), at::cuda::getCurrentCUDAStream().stream(),
            path);
      },
      steps);
}

}  // namespace

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "cross_entropy_bench", kUsage)) return 0;
  const std::optional<mt::bench::KernelBenchArgs> args =
      mt::bench::ParseKernelBenchArgs(argc, argv, "cross_entropy_bench", kUsage, 20);
  if (!args.has_value()) return 2;
  if (!args->cuda) {
    std::fprintf(stderr,
                 "cross_entropy_bench: the fused kernel runs on CUDA only (--device cuda)\n");
    return 2;
  }
  if (args->dtype == torch::kHalf) {
    std::fprintf(stderr,
                 "cross_entropy_bench: --dtype fp16: mt's fp16 loss is the chain (want "
                 "bf16 or fp32)\n");
    return 2;
  }
  const auto options =
      torch::TensorOptions().device(torch::Device(args->device)).dtype(args->dtype);
  std::printf("cross_entropy_bench: %s %s, %d steps; ms per call (TB/s)\n", args->device.c_str(),
              args->dtype_name.c_str(), args->steps);
  std::printf("%-5s %6s | %8s | %16s %16s | %8s %8s %8s\n", "size", "rows", "chain", "two-pass",
              "staged", "2p/chain", "st/chain", "st/2p");
  torch::manual_seed(1);
  for (const mt::bench::KernelBenchSize& s : mt::bench::kKernelBenchSizes) {
    torch::Tensor logits = torch::randn({s.tokens, kVocab}, options) * 3;
    const torch::Tensor targets =
        torch::randint(0, kVocab, {s.tokens}, options.dtype(torch::kLong));
    const torch::Tensor leaf = logits.detach().clone().requires_grad_(true);
    const double chain = mt::bench::TimeMs(
        [&] {
          torch::nn::functional::cross_entropy(leaf.to(torch::kFloat), targets).backward();
          leaf.mutable_grad().reset();
        },
        args->steps, true);
    const double two =
        KernelMs(mt::kernels::CrossEntropyPath::kTwoPass, logits, targets, args->steps);
    const double staged =
        KernelMs(mt::kernels::CrossEntropyPath::kStaged, logits, targets, args->steps);
    if (two < 0 || staged < 0) return 1;
    const double gb = 2.0 * static_cast<double>(logits.numel()) * logits.element_size() / 1e9;
    std::printf("%-5s %6ld | %8.3f | %7.3f (%4.2f) %7.3f (%4.2f) | %7.2fx %7.2fx %7.3fx\n", s.name,
                static_cast<long>(s.tokens), chain, two, gb / two, staged, gb / staged, chain / two,
                chain / staged, two / staged);
  }
  return 0;
}
