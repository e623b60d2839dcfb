// layer_norm_bench: the pre-LayerNorm block's `sum = x + residual; y = LayerNorm(sum)` through
// LibTorch's chain (an add and torch::layer_norm: what mt runs without --fused-layernorm) and
// through kernels::FusedAddLayerNorm, at the engine bench's three sizes (tokens = micro-batch x
// 1,024), forward alone (no autograd) and forward + backward (both outputs' gradients), in the
// same run on the same GPU. Prints ms per call and the ratio to the chain (> 1: faster). On
// CUDA, then the backward kernel alone (LaunchLayerNormBackward, with the residual stream's
// gradient), ms per call and the bytes' rate (dy, x and dsum read, dx written), without and with
// the residual bias's gradient (model::GptConfig::fold_linear_bias), against kernels::ColumnSum
// of d x, the pass that gradient replaces: "saved" = without + ColumnSum - with; and the staged,
// pipelined and register kernels on the same call (LayerNormBackwardPath::kStaged, kPipelined,
// kRegister), each against the default's choice: its time over the default's.
//
//   layer_norm_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]
#include <ATen/cuda/CUDAContext.h>
#include <torch/torch.h>

#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "bench/engine/kernel_bench.h"
#include "common/cli/help_version.h"
#include "worker/kernels/column_sum.h"
#include "worker/kernels/kind_of.h"
#include "worker/kernels/layer_norm.h"
#include "worker/kernels/layer_norm_launch.h"

namespace {

constexpr char kUsage[] =
    "usage: layer_norm_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]\n"
    "Times x + residual and LayerNorm: LibTorch's chain against kernels::FusedAddLayerNorm;\n"
    "on CUDA also the backward kernel alone, without and with the residual bias's gradient,\n"
    "against the ColumnSum that gradient replaces.";

// The backward kernel alone (dy, x, dsum [tokens, hidden]; x's mean and rstd), with the residual
// bias's gradient where `residual_bias`: ms per call; negative after printing the launch's error.
double BackwardMs(
    const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& dsum,
    const torch::Tensor& w, int steps, bool residual_bias,
    mt::kernels::LayerNormBackwardPath path = mt::kernels::LayerNormBackwardPath::kAuto) {
  const int64_t rows = x.size(0), hidden = x.size(1);
  const torch::Tensor xf = x.to(torch::kFloat);
  const torch::Tensor mean = xf.mean(1);
  const torch::Tensor rstd = torch::rsqrt(xf.var(1, /*unbiased=*/false) + 1e-5);
  torch::Tensor dx = torch::empty_like(x), dw = torch::empty_like(w), db = torch::empty_like(w);
  torch::Tensor drb = torch::empty_like(w);
  torch::Tensor partial = torch::empty({mt::kernels::LayerNormBackwardSums(residual_bias) *
                                            mt::kernels::LayerNormBackwardBlocks(rows),
                                        hidden},
                                       x.options().dtype(torch::kFloat));
  return mt::bench::TimeLaunchMs(
      "layer_norm_bench",
      [&] {
        return mt::kernels::LaunchLayerNormBackward(
            mt::kernels::KindOf(x.scalar_type()), dy.data_ptr(), x.data_ptr(),
            mean.data_ptr<float>(), rstd.data_ptr<float>(), w.data_ptr(), dsum.data_ptr(),
            dx.data_ptr(), dw.data_ptr(), db.data_ptr(), partial.data_ptr<float>(), rows, hidden,
            at::cuda::getCurrentCUDAStream().stream(), residual_bias ? drb.data_ptr() : nullptr,
            mt::kernels::DropoutArgs{}, nullptr, path);
      },
      steps);
}

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
  if (!cuda) return 0;
  std::printf(
      "backward kernel with dsum, ms per call (TB/s): without | with the residual bias's "
      "gradient | ColumnSum of d x | saved | the staged, pipelined and register kernels with it "
      "(each one's time over the default's)\n");
  for (const mt::bench::KernelBenchSize& s : mt::bench::kKernelBenchSizes) {
    const torch::Tensor x = torch::randn({s.tokens, s.hidden}, options) * 2 + 0.5;
    const torch::Tensor w = torch::rand({s.hidden}, options) + 0.5;
    const torch::Tensor dy = torch::randn({s.tokens, s.hidden}, options);
    const torch::Tensor dsum = torch::randn({s.tokens, s.hidden}, options);
    const double without = BackwardMs(dy, x, dsum, w, steps, /*residual_bias=*/false);
    const double with = BackwardMs(dy, x, dsum, w, steps, /*residual_bias=*/true);
    const double staged = BackwardMs(dy, x, dsum, w, steps, /*residual_bias=*/true,
                                     mt::kernels::LayerNormBackwardPath::kStaged);
    const double pipe = BackwardMs(dy, x, dsum, w, steps, /*residual_bias=*/true,
                                   mt::kernels::LayerNormBackwardPath::kPipelined);
    const double reg = BackwardMs(dy, x, dsum, w, steps, /*residual_bias=*/true,
                                  mt::kernels::LayerNormBackwardPath::kRegister);
    if (without < 0 || with < 0 || staged < 0 || pipe < 0 || reg < 0) return 1;
    const double column_sum =
        mt::bench::TimeMs([&] { mt::kernels::ColumnSum(dsum); }, steps, /*cuda=*/true);
    const double gb = 4.0 * static_cast<double>(x.numel()) * x.element_size() / 1e9;
    std::printf(
        "%-5s %7.4f (%4.2f) | %7.4f | %7.4f | %7.4f | %7.4f (%.3fx) %7.4f (%.3fx) %7.4f (%.3fx)\n",
        s.name, without, gb / without, with, column_sum, without + column_sum - with, staged,
        staged / with, pipe, pipe / with, reg, reg / with);
  }
  return 0;
}
