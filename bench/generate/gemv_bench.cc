// gemv_bench: the linear layers of a decode step alone, kernels::Gemv against LibTorch's linear
// (cuBLAS) in the same run on the same GPU. For a GPT-2 size, 24 layers' weights of their own
// (more than the GPU's L2 holds, so every call reads its weight from memory): per layer the QKV,
// projection, fc1 (+ GELU) and fc2 linears of `rows` rows, the whole chain captured once in a
// CUDA graph and replayed (the decode step's form). Prints, per row count, ms per layer of each,
// the weights' bytes over that time and the ratio (> 1: Gemv faster).
//
//   gemv_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <cstdio>
#include <optional>
#include <vector>

#include "bench/engine/kernel_bench.h"
#include "common/cli/help_version.h"
#include "worker/kernels/gemv.h"

namespace {

constexpr char kUsage[] =
    "usage: gemv_bench [--device cuda] [--dtype bf16|fp16|fp32] [--steps N]\n"
    "Times a decode step's linear layers: kernels::Gemv against LibTorch's linear (cuBLAS).";

constexpr int kLayers = 24;

struct Layer {
  torch::Tensor qkv, qkv_b, proj, proj_b, fc1, fc1_b, fc2, fc2_b;
};

std::vector<Layer> MakeLayers(int64_t h, const torch::TensorOptions& o) {
  std::vector<Layer> layers(kLayers);
  for (Layer& l : layers) {
    l.qkv = torch::randn({3 * h, h}, o) * 0.02;
    l.proj = torch::randn({h, h}, o) * 0.02;
    l.fc1 = torch::randn({4 * h, h}, o) * 0.02;
    l.fc2 = torch::randn({h, 4 * h}, o) * 0.02;
    l.qkv_b = torch::zeros({3 * h}, o);
    l.proj_b = torch::zeros({h}, o);
    l.fc1_b = torch::zeros({4 * h}, o);
    l.fc2_b = torch::zeros({h}, o);
  }
  return layers;
}

// Milliseconds per replay of `chain` captured in a CUDA graph (LibTorch's Gemv path and cuBLAS
// alike), over `steps` replays.
template <typename F>
double GraphMs(F&& chain, int steps) {
  at::cuda::CUDAGraph graph;
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  torch::cuda::synchronize();
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    chain();  // warm-up (cuBLAS picks its kernels, the allocator its blocks)
    graph.capture_begin();
    chain();
    graph.capture_end();
  }
  side.synchronize();
  return mt::bench::TimeMs([&] { graph.replay(); }, steps, /*cuda=*/true);
}

}  // namespace

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "gemv_bench", kUsage)) return 0;
  const std::optional<mt::bench::KernelBenchArgs> args =
      mt::bench::ParseKernelBenchArgs(argc, argv, "gemv_bench", kUsage, 50);
  if (!args.has_value()) return 2;
  if (!args->cuda) {
    std::fprintf(stderr, "gemv_bench: --device %s: the bench times CUDA kernels; want cuda\n",
                 args->device.c_str());
    return 2;
  }
  torch::NoGradGuard no_grad;
  const auto o = torch::TensorOptions().device(torch::Device(args->device)).dtype(args->dtype);
  std::printf("gemv_bench: %s %s, %d replays of %d layers; ms per layer (weights' GB/s)\n",
              args->device.c_str(), args->dtype_name.c_str(), args->steps, kLayers);
  std::printf("%-5s %4s | %16s | %16s | %6s\n", "size", "rows", "cuBLAS", "Gemv", "ratio");
  torch::manual_seed(1);
  for (const auto& [name, h] : {std::pair<const char*, int64_t>{"124m", 768}, {"1.3b", 2048}}) {
    const std::vector<Layer> layers = MakeLayers(h, o);
    const double bytes = 12.0 * h * h * static_cast<double>(torch::elementSize(args->dtype));
    for (const int64_t rows : {1, 2, 4, 8}) {
      const torch::Tensor x = torch::randn({rows, h}, o);
      const torch::Tensor x4 = torch::randn({rows, 4 * h}, o);
      if (!mt::kernels::GemvAvailable(x, layers[0].qkv)) continue;
      auto run = [&](bool gemv) {
        return [&, gemv] {
          for (const Layer& l : layers) {
            auto linear = [&](const torch::Tensor& in, const torch::Tensor& w,
                              const torch::Tensor& b, bool gelu) {
              if (gemv) return mt::kernels::Gemv(in, w, b, gelu);
              const torch::Tensor y = torch::addmm(b, in, w.t());
              return gelu ? torch::gelu(y, "tanh") : y;
            };
            linear(x, l.qkv, l.qkv_b, false);
            linear(x, l.proj, l.proj_b, false);
            linear(x, l.fc1, l.fc1_b, true);
            linear(x4, l.fc2, l.fc2_b, false);
          }
        };
      };
      const double cublas = GraphMs(run(false), args->steps) / kLayers;
      const double ours = GraphMs(run(true), args->steps) / kLayers;
      std::printf("%-5s %4ld | %7.4f (%5.0f) | %7.4f (%5.0f) | %5.2fx\n", name,
                  static_cast<long>(rows), cublas, bytes / cublas / 1e6, ours, bytes / ours / 1e6,
                  cublas / ours);
    }
  }
  return 0;
}
