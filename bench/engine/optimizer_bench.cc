// optimizer_bench: the optimizer's fused kernels (worker/kernels/adamw.h) over the parameters of
// the engine bench's three GPT sizes, in the same run on the same GPU:
//   - kernels::GradSumOfSquares (the global norm before clipping) against LibTorch's chain of
//     one fp32 norm per gradient, a stack and a sum (what clip_grad_norm_ runs);
//   - kernels::FusedAdamW against a device copy of as many bytes as it moves (gradient, master,
//     moments and model read; master, moments and model written): the memory's limit, which a
//     memory-bound update can approach but not pass.
// Prints ms per call, the bytes' rate and the ratios (> 1: ours faster; the AdamW ratio is ours
// over the copy's time, < 1, and 1 is the limit).
//
//   optimizer_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/engine/kernel_bench.h"
#include "common/cli/help_version.h"
#include "worker/kernels/adamw.h"

namespace {

constexpr char kUsage[] =
    "usage: optimizer_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]\n"
    "Times the fused sum of squares against LibTorch's per-gradient norms, and the fused AdamW\n"
    "against a copy of the bytes it moves, over the parameters of GPT 124M, 350M and 1.3B.";

constexpr int64_t kVocab = 50304, kPositions = 1024;
constexpr int64_t kAlign = 64;  // elements between pieces' starts in the flat buffers

// The element counts of a GPT's parameters (tied embedding, learned positions, pre-LN).
std::vector<int64_t> ParameterSizes(const mt::bench::KernelBenchSize& s) {
  const int64_t h = s.hidden;
  std::vector<int64_t> sizes = {kVocab * h, kPositions * h};
  for (int l = 0; l < s.layers; ++l) {
    for (int64_t n : {h, h, 3 * h * h, 3 * h, h * h, h, h, h, 4 * h * h, 4 * h, 4 * h * h, h}) {
      sizes.push_back(n);
    }
  }
  sizes.push_back(h);
  sizes.push_back(h);
  return sizes;
}

struct Setup {
  std::vector<torch::Tensor> grads;
  std::vector<mt::kernels::GradPiece> grad_pieces;
  std::vector<mt::kernels::AdamWPiece> pieces;
  mt::kernels::AdamWState state;
  int64_t elements = 0;
};

Setup MakeSetup(const mt::bench::KernelBenchSize& shape, const torch::TensorOptions& grad_options) {
  Setup s;
  const auto f32 = grad_options.dtype(torch::kFloat);
  int64_t at = 0;
  for (int64_t n : ParameterSizes(shape)) {
    torch::Tensor g = (torch::randn({n}, f32) * 1e-2).to(grad_options.dtype());
    s.grads.push_back(g);
    s.grad_pieces.push_back({g, true});
    mt::kernels::AdamWPiece p;
    p.grad = g;
    p.state_begin = p.model_begin = at;
    p.numel = n;
    p.weight_decay = n > shape.hidden * 4;  // the matrices and embeddings
    s.pieces.push_back(p);
    s.elements += n;
    at += (n + kAlign - 1) / kAlign * kAlign;
  }
  s.state.master = torch::randn({at}, f32) * 0.02;
  s.state.exp_avg = torch::zeros({at}, f32);
  s.state.exp_avg_sq = torch::zeros({at}, f32);
  s.state.master_is_model = grad_options.dtype() == torch::kFloat;
  if (!s.state.master_is_model) s.state.model = s.state.master.to(grad_options.dtype());
  s.state.step = torch::ones({}, f32);
  s.state.grad_divisor = torch::ones({}, f32);
  s.state.found_inf = torch::zeros({}, f32);
  return s;
}

// Bytes AdamW moves a step: the gradient read and the model copy written, both in the
// gradient's dtype here, and the fp32 master and two moments read and written (an fp32 model is
// the master): 28 bytes a parameter in bf16.
double AdamWBytes(const Setup& s, int64_t grad_bytes) {
  const int64_t model = s.state.master_is_model ? 0 : grad_bytes;
  return static_cast<double>(s.elements) * static_cast<double>(grad_bytes + 6 * 4 + model);
}

}  // namespace

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "optimizer_bench", kUsage)) return 0;
  const std::optional<mt::bench::KernelBenchArgs> args =
      mt::bench::ParseKernelBenchArgs(argc, argv, "optimizer_bench", kUsage, 20);
  if (!args.has_value()) return 2;
  if (!args->cuda || !mt::kernels::FusedOptimizerKernelsBuilt()) {
    std::fprintf(stderr, "optimizer_bench: the fused kernels run on CUDA only (--device cuda)\n");
    return 2;
  }
  const auto options =
      torch::TensorOptions().device(torch::Device(args->device)).dtype(args->dtype);
  const int64_t grad_bytes = torch::empty({}, options).element_size();
  std::printf("optimizer_bench: %s %s, %d steps; ms per call\n", args->device.c_str(),
              args->dtype_name.c_str(), args->steps);
  std::printf("%-5s %7s | %9s %9s %7s %6s | %9s %9s %6s %10s\n", "size", "params", "norms", "sumsq",
              "ratio", "TB/s", "copy", "adamw", "TB/s", "adamw/copy");
  torch::manual_seed(1);
  for (const mt::bench::KernelBenchSize& shape : mt::bench::kKernelBenchSizes) {
    Setup s = MakeSetup(shape, options);
    if (!mt::kernels::GradSumOfSquaresSupports(s.grad_pieces) ||
        !mt::kernels::FusedAdamWSupports(s.state, s.pieces)) {
      std::fprintf(stderr, "optimizer_bench: %s: the kernels refuse these tensors\n", shape.name);
      return 1;
    }
    auto chain = [&] {
      std::vector<torch::Tensor> norms;
      norms.reserve(s.grads.size());
      for (const torch::Tensor& g : s.grads) {
        norms.push_back(torch::norm(g, 2, torch::kFloat));
      }
      return torch::stack(norms).square().sum();
    };
    const double want = chain().item<double>();
    const double got = mt::kernels::GradSumOfSquares(s.grad_pieces).item<double>();
    if (std::abs(got - want) > 1e-4 * want) {
      std::fprintf(stderr, "optimizer_bench: %s: sum of squares %.8g, LibTorch's %.8g\n",
                   shape.name, got, want);
      return 1;
    }
    const double norms_ms = mt::bench::TimeMs(chain, args->steps, true);
    const double sumsq_ms =
        mt::bench::TimeMs([&] { mt::kernels::GradSumOfSquares(s.grad_pieces); }, args->steps, true);
    mt::kernels::AdamWHyper hyper;
    hyper.lr = 1e-4;
    hyper.weight_decay = 0.1;
    const double bytes = AdamWBytes(s, grad_bytes);
    // The copy: half the bytes read, half written.
    torch::Tensor from =
        torch::empty({static_cast<int64_t>(bytes / 2)}, options.dtype(torch::kByte));
    torch::Tensor to = torch::empty_like(from);
    const double copy_ms = mt::bench::TimeMs([&] { to.copy_(from); }, args->steps, true);
    from = to = torch::Tensor();
    const double adamw_ms = mt::bench::TimeMs(
        [&] { mt::kernels::FusedAdamW(s.state, s.pieces, hyper); }, args->steps, true);
    const double grad_total = static_cast<double>(s.elements) * grad_bytes;
    std::printf("%-5s %6.0fM | %9.3f %9.3f %6.2fx %6.2f | %9.3f %9.3f %6.2f %9.2fx\n", shape.name,
                s.elements / 1e6, norms_ms, sumsq_ms, norms_ms / sumsq_ms,
                grad_total / (sumsq_ms * 1e9), copy_ms, adamw_ms, bytes / (adamw_ms * 1e9),
                copy_ms / adamw_ms);
  }
  return 0;
}
