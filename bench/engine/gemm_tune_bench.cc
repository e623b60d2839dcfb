// gemm_tune_bench: how much a training step's GEMMs would gain if each shape ran the fastest of
// cuBLASLt's candidate algorithms instead of the heuristic's first pick (what LtMatmul and
// LibTorch run). For the engine bench's three sizes (tokens = micro-batch x 1,024), each of a
// layer's four linears (QKV, attention projection, fc1, fc2) and the LM head, forward, input
// gradient and weight gradient (and the MLP's two GEMMs with their fused epilogues: fc1's forward
// with bias + GELU, fc2's input gradient with GELU's derivative), it times the heuristic's first
// --algos algorithms in the same run (kernels::LtTimeAlgorithms) and prints the first pick's ms,
// the best's, and a step's sum of both (the layer's GEMMs times the layer count, plus the LM
// head's).
//
//   gemm_tune_bench [--device cuda|cuda:N] [--dtype bf16|fp16|fp32] [--algos N] [--steps N]
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

#include "bench/engine/kernel_bench.h"
#include "common/cli/help_version.h"
#include "worker/kernels/gemm_lt_launch.h"
#include "worker/kernels/kind_of.h"

namespace {

constexpr char kUsage[] =
    "usage: gemm_tune_bench [--device cuda|cuda:N] [--dtype bf16|fp16|fp32] [--algos N]\n"
    "                       [--steps N]\n"
    "Times cuBLASLt's candidate algorithms for a training step's GEMMs against the heuristic's\n"
    "first pick (ms per call; --algos candidates, default 16; --steps calls each, default 10).";

constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;
constexpr int64_t kVocab = 50304;

// A linear y [T, out] = x [T, in] w^T, w [out, in], all row-major; `count` of them a step.
struct Linear {
  const char* name;
  int64_t in, out, count;
};

// The three GEMMs of a linear in cuBLAS's column-major terms (a row-major [r, c] tensor is a
// column-major c x r matrix with leading dimension c).
std::vector<std::pair<const char*, mt::kernels::LtMatmulArgs>> Passes(const Linear& l,
                                                                      int64_t tokens,
                                                                      const torch::Tensor& x,
                                                                      const torch::Tensor& w,
                                                                      const torch::Tensor& y) {
  mt::kernels::LtMatmulArgs fwd;  // y^T [out x T] = w [out x in] x^T [in x T]
  fwd.transpose_a = true;
  fwd.m = l.out, fwd.n = tokens, fwd.k = l.in;
  fwd.a = w.data_ptr(), fwd.lda = l.in;
  fwd.b = x.data_ptr(), fwd.ldb = l.in;
  fwd.d = y.data_ptr(), fwd.ldd = l.out;
  mt::kernels::LtMatmulArgs dgrad;  // dx^T [in x T] = w^T [in x out] dy^T [out x T]
  dgrad.m = l.in, dgrad.n = tokens, dgrad.k = l.out;
  dgrad.a = w.data_ptr(), dgrad.lda = l.in;
  dgrad.b = y.data_ptr(), dgrad.ldb = l.out;
  dgrad.d = x.data_ptr(), dgrad.ldd = l.in;
  mt::kernels::LtMatmulArgs wgrad;  // dw^T [in x out] = x^T [in x T] dy [T x out]
  wgrad.transpose_b = true;
  wgrad.m = l.in, wgrad.n = l.out, wgrad.k = tokens;
  wgrad.a = x.data_ptr(), wgrad.lda = l.in;
  wgrad.b = y.data_ptr(), wgrad.ldb = l.out;
  wgrad.d = w.data_ptr(), wgrad.ldd = l.in;
  return {{"fwd", fwd}, {"dgrad", dgrad}, {"wgrad", wgrad}};
}

// The MLP's two epilogue GEMMs as the fused MLP runs them (fused_mlp.cc): fc1's forward with the
// bias and GELU in the epilogue, writing the pre-activation as aux (`fwd` of fc1 given), and
// fc2's input gradient times GELU's derivative of that aux (`dgrad` of fc2 given). `aux` is
// [tokens, 4h], `bias` [4h].
mt::kernels::LtMatmulArgs WithEpilogue(mt::kernels::LtMatmulArgs g, mt::kernels::LtEpilogue e,
                                       const torch::Tensor& aux, const torch::Tensor& bias) {
  g.epilogue = e;
  g.aux = aux.data_ptr();
  g.ldaux = g.m;
  if (e == mt::kernels::LtEpilogue::kGeluAuxBias) g.bias = bias.data_ptr();
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  if (mt::cli::AnswerHelpOrVersion(argc, argv, "gemm_tune_bench", kUsage)) return 0;
  int algos = 16;
  const std::optional<mt::bench::KernelBenchArgs> args = mt::bench::ParseKernelBenchArgs(
      argc, argv, "gemm_tune_bench", kUsage, 10, {{"--algos", 1, 64, &algos}});
  if (!args.has_value()) return 2;
  if (!args->cuda) {
    std::fprintf(stderr, "gemm_tune_bench: it times cuBLASLt (--device cuda or cuda:N)\n");
    return 2;
  }
  const torch::Device device(args->device);
  const c10::cuda::CUDAGuard guard(device);
  const auto options = torch::TensorOptions().device(device).dtype(args->dtype);
  const torch::Tensor workspace = torch::empty({kWorkspaceBytes}, options.dtype(torch::kByte));
  void* handle = at::cuda::getCurrentCUDABlasLtHandle();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  std::printf(
      "gemm_tune_bench: %s, the heuristic's first %d algorithms, %d calls each; ms a call\n",
      args->dtype_name.c_str(), algos, args->steps);
  std::printf("%-5s %-8s %-11s %6s %6s %6s | %8s %8s %5s %6s\n", "size", "linear", "pass", "m", "n",
              "k", "first", "best", "index", "gain");
  torch::manual_seed(1);
  for (const mt::bench::KernelBenchSize& s : mt::bench::kKernelBenchSizes) {
    const int64_t h = s.hidden;
    const Linear linears[] = {{"qkv", h, 3 * h, s.layers},
                              {"proj", h, h, s.layers},
                              {"fc1", h, 4 * h, s.layers},
                              {"fc2", 4 * h, h, s.layers},
                              {"lm_head", h, kVocab, 1}};
    double first_sum = 0, best_sum = 0;
    for (const Linear& l : linears) {
      const torch::Tensor x = torch::randn({s.tokens, l.in}, options);
      const torch::Tensor w = torch::randn({l.out, l.in}, options) * 0.02;
      const torch::Tensor y = torch::randn({s.tokens, l.out}, options);
      auto passes = Passes(l, s.tokens, x, w, y);
      // The MLP's hidden [tokens, 4h] and fc1's bias: the epilogues' aux and bias.
      const torch::Tensor aux = l.name == std::string("fc1")   ? torch::empty_like(y)
                                : l.name == std::string("fc2") ? torch::randn_like(x)
                                                               : torch::Tensor();
      const torch::Tensor bias = torch::randn({4 * h}, options);
      if (l.name == std::string("fc1")) {
        passes.emplace_back(
            "fwd+gelu",
            WithEpilogue(passes[0].second, mt::kernels::LtEpilogue::kGeluAuxBias, aux, bias));
      } else if (l.name == std::string("fc2")) {
        passes.emplace_back(
            "dgrad+dgelu",
            WithEpilogue(passes[1].second, mt::kernels::LtEpilogue::kDGelu, aux, bias));
      }
      for (auto [pass, g] : passes) {
        g.kind = mt::kernels::KindOf(args->dtype);
        std::vector<float> ms;
        const int status = mt::kernels::LtTimeAlgorithms(
            g, handle, workspace.data_ptr(), kWorkspaceBytes, stream, algos, args->steps, &ms);
        if (status != 0 || ms.empty() || ms[0] < 0) {
          std::fprintf(stderr, "gemm_tune_bench: %s %s %s: %s\n", s.name, l.name, pass,
                       mt::kernels::LtStatusName(status));
          return 1;
        }
        size_t best = 0;
        for (size_t i = 1; i < ms.size(); ++i) {
          if (ms[i] > 0 && ms[i] < ms[best]) best = i;
        }
        if (g.epilogue == mt::kernels::LtEpilogue::kNone) {  // sums of the plain GEMMs, as before
          first_sum += l.count * ms[0];
          best_sum += l.count * ms[best];
        }
        std::printf("%-5s %-8s %-11s %6ld %6ld %6ld | %8.3f %8.3f %5zu %5.1f%%\n", s.name, l.name,
                    pass, static_cast<long>(g.m), static_cast<long>(g.n), static_cast<long>(g.k),
                    ms[0], ms[best], best, 100.0 * (ms[0] - ms[best]) / ms[0]);
      }
    }
    std::printf("%-5s a step's GEMMs: first pick %.2f ms, best %.2f ms (%.1f%% less)\n", s.name,
                first_sum, best_sum, 100.0 * (first_sum - best_sum) / first_sum);
  }
  return 0;
}
