// TunedMm and TunedAddmm (tuned_mm.h) on the GPU (label `gpu`; skips without CUDA), and their
// CPU path.
//
// Against an fp64 product of the same (rounded) operands, for fp32, bf16 and fp16, in every
// layout it takes without a copy (each operand contiguous, the transpose of a contiguous matrix,
// or rows of a wider matrix) and one it copies, at multiples of 8 and at odd sizes (where
// cuBLASLt is told the lesser alignment). Bounds: the output's rounding (2^-24 fp32, 2^-8 bf16,
// 2^-11 fp16 relative), doubled, plus fp32 accumulation over K terms relative to the largest
// output. The tuning table: one entry a problem, the same bits on every later call, a CUDA graph
// replaying the eager bits, a capture holding a memset node only where the workspace was chosen, a
// capture of a problem not met before running the heuristic's pick without remembering it (LtMatmul
// with a table of the test's own). Autograd inputs and CPU tensors take torch::mm, exactly.
// TunedAddmm: the same products plus a bias in every layout, its own tuning entry beside the bare
// product's, and a bias the epilogue cannot take (misaligned, or needing a gradient) through
// torch::addmm. A scale read from the device: the same products times it, its own tuning entry.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "worker/kernels/tuned_mm.h"

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/version.h>

#include "worker/kernels/gemm_lt_launch.h"
#include "worker/kernels/graph_capture_for_test.h"
#endif

namespace mt::kernels::tuned_mm_gpu_test {
namespace {

TEST(TunedMmCpu, IsTorchMm) {
  torch::manual_seed(3);
  const torch::Tensor a = torch::randn({7, 5}, torch::kDouble);
  const torch::Tensor b = torch::randn({5, 3}, torch::kDouble);
  EXPECT_TRUE(torch::equal(TunedMm(a, b), torch::mm(a, b)));
  EXPECT_TRUE(torch::equal(TunedMm(b.t(), a.t()), torch::mm(b.t(), a.t())));
}

TEST(TunedMmCpu, ScaledIsTorchMmTimesTheScale) {
  torch::manual_seed(5);
  const torch::Tensor a = torch::randn({7, 5}, torch::kDouble);
  const torch::Tensor b = torch::randn({5, 3}, torch::kDouble);
  const torch::Tensor s = torch::full({}, 0.375, torch::kDouble);
  EXPECT_TRUE(torch::equal(TunedMm(a, b, s), torch::mm(a, b) * 0.375));
  EXPECT_TRUE(torch::equal(TunedMm(b.t(), a.t(), s.view({1})), torch::mm(b.t(), a.t()) * 0.375));
}

TEST(TunedMmCpu, AddmmIsTorchAddmm) {
  torch::manual_seed(4);
  const torch::Tensor a = torch::randn({7, 5}, torch::kDouble);
  const torch::Tensor b = torch::randn({5, 3}, torch::kDouble);
  const torch::Tensor bias = torch::randn({3}, torch::kDouble);
  EXPECT_TRUE(torch::equal(TunedAddmm(bias, a, b), torch::addmm(bias, a, b)));
  const torch::Tensor bias7 = torch::randn({7}, torch::kDouble);
  EXPECT_TRUE(torch::equal(TunedAddmm(bias7, b.t(), a.t()), torch::addmm(bias7, b.t(), a.t())));
}

// CPU tensors (and a build without CUDA) time nothing: the counts stay at zero.
TEST(TunedMmCpu, TimesNothing) {
  const GemmTuningCounts before = GemmTuningSoFar();
  TunedMm(torch::randn({64, 32}), torch::randn({32, 48}));
  const GemmTuningCounts after = GemmTuningSoFar();
  EXPECT_EQ(after.problems, before.problems);
  EXPECT_EQ(after.moved, before.moved);
#if !MT_KERNELS_WITH_CUDA
  EXPECT_EQ(after.problems, 0u);
  EXPECT_EQ(after.moved, 0u);
#endif
}

#if MT_KERNELS_WITH_CUDA
// max over elements of |got - want| - (rel |want| + abs_of_largest max|want|); <= 0 passes.
double Excess(const torch::Tensor& got, const torch::Tensor& want, double rel,
              double abs_of_largest) {
  const torch::Tensor g = got.to(torch::kDouble), w = want.to(torch::kDouble);
  const double largest = w.abs().max().item<double>();
  return ((g - w).abs() - (rel * w.abs() + abs_of_largest * largest)).max().item<double>();
}

double RoundingOf(torch::ScalarType t) {
  switch (t) {
    case torch::kBFloat16:
      return std::ldexp(1.0, -8);
    case torch::kHalf:
      return std::ldexp(1.0, -11);
    default:
      return std::ldexp(1.0, -24);
  }
}

// An [r, c] operand in layout `how`: 0 contiguous, 1 the transpose of a contiguous [c, r],
// 2 the first c columns of a contiguous [r, c + 8], 3 every other row of a [2r, c] (copied).
torch::Tensor Operand(int64_t r, int64_t c, int how, torch::ScalarType dtype) {
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  switch (how) {
    case 1:
      return torch::randn({c, r}, options).to(dtype).t();
    case 2:
      return torch::randn({r, c + 8}, options).to(dtype).narrow(1, 0, c);
    case 3:
      return torch::randn({2 * r, c}, options).to(dtype).slice(0, 0, 2 * r, 2);
    default:
      return torch::randn({r, c}, options).to(dtype);
  }
}

// check(a, b, what) for fp32, bf16 and fp16 operands of four shapes (m x k times k x n), each
// operand in each of Operand's four layouts.
template <typename Check>
void ForEveryLayout(uint64_t seed, Check&& check) {
  torch::manual_seed(seed);
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    for (const auto& [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{96, 72, 40},
                                  {33, 17, 9},
                                  {1, 64, 24},
                                  {256, 1000, 8}}) {
      for (int how_a = 0; how_a < 4; ++how_a) {
        for (int how_b = 0; how_b < 4; ++how_b) {
          const torch::Tensor a = Operand(m, k, how_a, dtype), b = Operand(k, n, how_b, dtype);
          check(a, b,
                std::string(c10::toString(dtype)) + " " + std::to_string(m) + "x" +
                    std::to_string(k) + "x" + std::to_string(n) + " layouts " +
                    std::to_string(how_a) + std::to_string(how_b));
        }
      }
    }
  }
}

// A fresh contiguous [a rows, b columns] in a's dtype, within the output's rounding (doubled)
// plus fp32 accumulation over `terms` terms relative to the largest entry of `want` (fp64).
void ExpectProduct(const torch::Tensor& got, const torch::Tensor& a, const torch::Tensor& b,
                   const torch::Tensor& want, int64_t terms, const std::string& what) {
  ASSERT_EQ(got.sizes(), (torch::IntArrayRef{a.size(0), b.size(1)})) << what;
  EXPECT_TRUE(got.is_contiguous()) << what;
  EXPECT_EQ(got.scalar_type(), a.scalar_type()) << what;
  EXPECT_LE(Excess(got, want, 2 * RoundingOf(a.scalar_type()), terms * std::ldexp(1.0, -23)), 0.0)
      << what;
}

TEST(TunedMmGpuTest, MatchesTheProductInEveryLayout) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ForEveryLayout(11, [](const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
    const torch::Tensor want = torch::mm(a.to(torch::kDouble), b.to(torch::kDouble));
    ExpectProduct(TunedMm(a, b), a, b, want, a.size(1), what);
  });
}

// A scale read from the device (the fused LM head's incoming gradient): scale x a b within the
// product's bounds, for a scale in fp32 and in the operands' dtype, and the scaled product is its
// own tuning problem beside the bare one's.
TEST(TunedMmGpuTest, ScalesTheProductInEveryLayout) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ForEveryLayout(16, [](const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
    const torch::Tensor want = torch::mm(a.to(torch::kDouble), b.to(torch::kDouble)) * 0.375;
    const auto cuda = torch::TensorOptions().device(torch::kCUDA);
    ExpectProduct(TunedMm(a, b, torch::full({}, 0.375, cuda.dtype(torch::kFloat))), a, b, want,
                  a.size(1), what + " fp32 scale");
    ExpectProduct(TunedMm(a, b, torch::full({1}, 0.375, cuda.dtype(a.scalar_type()))), a, b, want,
                  a.size(1), what + " scale of its dtype");
  });
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const torch::Tensor a = torch::randn({1032, 264}, options), b = torch::randn({264, 520}, options);
  const size_t before = ProcessLtTuning().size();
  const torch::Tensor scaled = TunedMm(a, b, torch::full({}, 2.0, options.dtype(torch::kFloat)));
  EXPECT_EQ(ProcessLtTuning().size(), before + 1);
  const torch::Tensor plain = TunedMm(a, b);
  EXPECT_EQ(ProcessLtTuning().size(), before + 2);
  EXPECT_TRUE(
      torch::equal(TunedMm(a, b, torch::full({}, 2.0, options.dtype(torch::kFloat))), scaled));
  EXPECT_EQ(ProcessLtTuning().size(), before + 2);
}

TEST(TunedMmGpuTest, AddmmAddsTheBiasInEveryLayout) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ForEveryLayout(15, [](const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
    const int64_t n = b.size(1);
    const torch::Tensor bias = Operand(1, n, 0, a.scalar_type()).view({n}) * 4;
    const torch::Tensor want =
        torch::addmm(bias.to(torch::kDouble), a.to(torch::kDouble), b.to(torch::kDouble));
    ExpectProduct(TunedAddmm(bias, a, b), a, b, want, a.size(1) + 1, what);
  });
}

// The bias changes the problem (cuBLASLt's epilogue): one entry for the product with a bias
// beside the bare product's, each tuned once and repeating its bits.
TEST(TunedMmGpuTest, AddmmIsItsOwnProblem) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(16);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  // Shapes no other test uses.
  const torch::Tensor a = torch::randn({2048, 792}, options),
                      b = torch::randn({1456, 792}, options), bias = torch::randn({1456}, options);
  const size_t before = ProcessLtTuning().size();
  const torch::Tensor with_bias = TunedAddmm(bias, a, b.t());
  EXPECT_EQ(ProcessLtTuning().size(), before + 1);
  const torch::Tensor bare = TunedMm(a, b.t());
  EXPECT_EQ(ProcessLtTuning().size(), before + 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(torch::equal(TunedAddmm(bias, a, b.t()), with_bias)) << i;
    EXPECT_TRUE(torch::equal(TunedMm(a, b.t()), bare)) << i;
  }
  EXPECT_EQ(ProcessLtTuning().size(), before + 2);
  // The bias's share: the two differ by the bias, up to bf16 rounding of outputs of this size.
  const torch::Tensor diff = with_bias.to(torch::kFloat) - bare.to(torch::kFloat);
  const double largest = with_bias.to(torch::kFloat).abs().max().item<double>();
  EXPECT_LE((diff - bias.to(torch::kFloat)).abs().max().item<double>(),
            2 * std::ldexp(1.0, -8) * largest + 1e-6);
}

// A bias the epilogue cannot take goes to torch::addmm: one 2 bytes off a 16-byte boundary, and
// one that needs a gradient (which then reaches it).
TEST(TunedMmGpuTest, AddmmTakesLibTorchForABiasItCannotAdd) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(17);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const torch::Tensor a = torch::randn({64, 48}, options), b = torch::randn({48, 40}, options);
  const torch::Tensor misaligned = torch::randn({41}, options).narrow(0, 1, 40);
  const size_t before = ProcessLtTuning().size();
  EXPECT_TRUE(torch::equal(TunedAddmm(misaligned, a, b), torch::addmm(misaligned, a, b)));
  EXPECT_EQ(ProcessLtTuning().size(), before);
  const torch::Tensor bias = torch::randn({40}, options.dtype(torch::kFloat)).requires_grad_(true);
  const torch::Tensor af = a.to(torch::kFloat), bf = b.to(torch::kFloat);
  const torch::Tensor y = TunedAddmm(bias, af, bf);
  ASSERT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(bias.grad(), torch::full({40}, 64.0, bias.grad().options())));
}

TEST(TunedMmGpuTest, TunesEachProblemOnceAndRepeatsItsBits) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(12);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  // A shape no other test uses, large enough for cuBLASLt to offer several candidates.
  const torch::Tensor a = torch::randn({2048, 776}, options),
                      b = torch::randn({776, 1480}, options);
  const size_t before = ProcessLtTuning().size();
  const torch::Tensor first = TunedMm(a, b);
  EXPECT_EQ(ProcessLtTuning().size(), before + 1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(TunedMm(a, b), first)) << i;
  EXPECT_EQ(ProcessLtTuning().size(), before + 1);
  TunedMm(a.narrow(0, 0, 1024), b);  // another problem: another entry
  EXPECT_EQ(ProcessLtTuning().size(), before + 2);
  EXPECT_LE(ProcessLtTuning().tuned_away(), ProcessLtTuning().size());
  // The counts profile_step prints are the table's.
  const GemmTuningCounts counts = GemmTuningSoFar();
  EXPECT_EQ(counts.problems, before + 2);
  EXPECT_EQ(counts.moved, ProcessLtTuning().tuned_away());
}

// --no-gemm-tuning (SetGemmTuning(false)): a problem not met before runs the heuristic's first
// pick and is not remembered; turned on again, the next call tunes it.
TEST(TunedMmGpuTest, WithTuningOffANewProblemIsNotTuned) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(13);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const torch::Tensor a = torch::randn({1536, 664}, options),
                      b = torch::randn({664, 1320}, options);
  const torch::Tensor want = torch::mm(a.to(torch::kDouble), b.to(torch::kDouble));
  const size_t before = ProcessLtTuning().size();
  SetGemmTuning(false);
  EXPECT_FALSE(GemmTuning());
  const torch::Tensor off = TunedMm(a, b);
  SetGemmTuning(true);
  EXPECT_EQ(ProcessLtTuning().size(), before);
  EXPECT_LE(Excess(off, want, 2 * RoundingOf(torch::kBFloat16), 664 * std::ldexp(1.0, -23)), 0.0);
  TunedMm(a, b);
  EXPECT_EQ(ProcessLtTuning().size(), before + 1);
}

TEST(TunedMmGpuTest, ACudaGraphReplaysTheEagerBits) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(13);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const torch::Tensor a = torch::randn({1536, 520}, options),
                      b = torch::randn({1056, 520}, options);
  at::cuda::CUDAGraph graph;
  const torch::Tensor out = CaptureForTest([&] { return TunedMm(a, b.t()); }, graph);
  const size_t tuned = ProcessLtTuning().size();
  for (int i = 0; i < 2; ++i) {
    graph.replay();
    torch::cuda::synchronize();
    EXPECT_TRUE(torch::equal(out, TunedMm(a, b.t()))) << i;  // tuned by the capture's warm-up
    a.normal_();
  }
  EXPECT_EQ(ProcessLtTuning().size(), tuned);
}

// LibTorch 2.9 and later can keep a captured graph for inspection (CUDAGraph(keep_graph),
// raw_cuda_graph()); before, the memset test below is not built.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
// The memset nodes of a CUDA graph captured from run().
int MemsetNodesOfCapture(const std::function<torch::Tensor()>& run) {
  at::cuda::CUDAGraph graph(/*keep_graph=*/true);  // the graph kept for inspection
  CaptureForTest(run, graph);
  const cudaGraph_t g = graph.raw_cuda_graph();
  size_t count = 0;
  EXPECT_EQ(cudaGraphGetNodes(g, nullptr, &count), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(count);
  EXPECT_EQ(cudaGraphGetNodes(g, nodes.data(), &count), cudaSuccess);
  int memsets = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    EXPECT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
    memsets += type == cudaGraphNodeTypeMemset;
  }
  return memsets;
}

// With the workspace optional (the default, gemm_tuning.h) the products' first pick needs none:
// with tuning off, a capture of a GPT-2 350M-sized linear's three GEMMs (forward with its bias,
// input and weight gradients; shapes no other test uses) holds no memset node. With tuning on,
// a memset node only where the tuning chose the workspace. With --gemm-workspace the same
// products are problems of their own and give the same product within its bounds. The memset
// counts themselves are cuBLASLt's choice: printed, not asserted.
TEST(TunedMmGpuTest, AnOptionalWorkspaceCostsAMemsetNodeOnlyWhereChosen) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_FALSE(GemmWorkspace());
  torch::manual_seed(18);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const torch::Tensor x = torch::randn({4104, 1048}, options),
                      w = torch::randn({3144, 1048}, options) * 0.03,
                      b = torch::randn({3144}, options), dy = torch::randn({4104, 3144}, options);
  const auto linear = [&] {
    TunedMm(dy, w);      // d input
    TunedMm(dy.t(), x);  // d weight
    return TunedAddmm(b, x, w.t());
  };
  SetGemmTuning(false);
  EXPECT_EQ(MemsetNodesOfCapture(linear), 0);
  SetGemmTuning(true);
  const size_t before = ProcessLtTuning().size();
  const size_t chosen_before = ProcessLtTuning().with_workspace();
  const int tuned_memsets = MemsetNodesOfCapture(linear);  // its warm-up tunes the three
  const size_t chosen = ProcessLtTuning().with_workspace() - chosen_before;
  EXPECT_EQ(ProcessLtTuning().size(), before + 3);
  EXPECT_LE(tuned_memsets, static_cast<int>(chosen));
  SetGemmWorkspace(true);
  const torch::Tensor with = linear();
  const int memsets_with = MemsetNodesOfCapture(linear);
  SetGemmWorkspace(false);
  EXPECT_EQ(ProcessLtTuning().size(), before + 6);  // the setting is part of the key
  const torch::Tensor want =
      torch::addmm(b.to(torch::kDouble), x.to(torch::kDouble), w.t().to(torch::kDouble));
  for (const torch::Tensor& got : {with, linear()}) {
    EXPECT_LE(Excess(got, want, 2 * RoundingOf(torch::kBFloat16), 1049 * std::ldexp(1.0, -23)),
              0.0);
  }
  std::printf("memset nodes: %d tuned (%zu of 3 given the workspace), %d with --gemm-workspace\n",
              tuned_memsets, chosen, memsets_with);
}
#endif  // LibTorch 2.9 and later

// x [r, k] w^T, w [n, k]: LtMatmul's arguments for y [r, n] (cuBLAS's column-major terms).
LtMatmulArgs LinearArgs(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& y) {
  LtMatmulArgs g;
  g.kind = FloatKind::kFloat32;
  g.transpose_a = true;
  g.m = w.size(0);
  g.n = x.size(0);
  g.k = x.size(1);
  g.a = w.data_ptr();
  g.lda = g.k;
  g.b = x.data_ptr();
  g.ldb = g.k;
  g.d = y.data_ptr();
  g.ldd = g.m;
  return g;
}

// A capture must not time candidates (that synchronises): a problem its table has not met runs
// the heuristic's first pick and stays unremembered until an eager call tunes it. The warm-up
// runs the first pick without a table (loading its kernel before the capture, as every capture
// in mt warms up first).
TEST(TunedMmGpuTest, ACaptureOfANewProblemRunsTheFirstPickWithoutRememberingIt) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(14);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  const torch::Tensor x = torch::randn({1288, 264}, options), w = torch::randn({712, 264}, options);
  const torch::Tensor workspace = torch::empty({int64_t{32} << 20}, options.dtype(torch::kByte));
  LtTuning tuning;
  auto run = [&](const torch::Tensor& y, LtTuning* t) -> int {
    return LtMatmul(LinearArgs(x, w, y), at::cuda::getCurrentCUDABlasLtHandle(),
                    workspace.data_ptr(), workspace.numel(),
                    at::cuda::getCurrentCUDAStream().stream(), t);
  };
  at::cuda::CUDAGraph graph;
  const torch::Tensor y = torch::empty({1288, 712}, options);
  int status = -100;
  const absl::Status captured = CaptureOnSideStream(
      graph, c10::cuda::current_device(),
      [&]() -> absl::Status {
        return run(y, nullptr) == 0 ? absl::OkStatus() : absl::InternalError("warm-up");
      },
      [&] { status = run(y, &tuning); });
  ASSERT_TRUE(captured.ok()) << captured;
  EXPECT_EQ(status, 0);
  EXPECT_EQ(tuning.size(), 0u);
  y.zero_();
  graph.replay();
  torch::cuda::synchronize();
  const torch::Tensor want = torch::mm(x.to(torch::kDouble), w.to(torch::kDouble).t());
  EXPECT_LE(Excess(y, want, 2 * RoundingOf(torch::kFloat), 264 * std::ldexp(1.0, -23)), 0.0);
  const torch::Tensor eager = torch::empty_like(y);
  EXPECT_EQ(run(eager, &tuning), 0);
  EXPECT_EQ(tuning.size(), 1u);
  EXPECT_LE(Excess(eager, want, 2 * RoundingOf(torch::kFloat), 264 * std::ldexp(1.0, -23)), 0.0);
}

// The candidates a tuning times (--gemm-tune-candidates): with one, a new problem is remembered
// on the heuristic's first pick, never moved off it, and gives the untuned call's bits; with the
// most, the pick is one of them and still the product.
TEST(TunedMmGpuTest, TheCandidateCountBoundsWhatTheTuningTries) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(15);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const torch::Tensor x = torch::randn({2056, 776}, options),
                      w = torch::randn({1480, 776}, options);
  const torch::Tensor workspace = torch::empty({int64_t{32} << 20}, options.dtype(torch::kByte));
  auto run = [&](const torch::Tensor& y, LtTuning* t, int candidates) -> int {
    LtMatmulArgs g = LinearArgs(x, w, y);
    g.kind = FloatKind::kBFloat16;
    return LtMatmul(g, at::cuda::getCurrentCUDABlasLtHandle(), workspace.data_ptr(),
                    workspace.numel(), at::cuda::getCurrentCUDAStream().stream(), t, candidates);
  };
  const torch::Tensor first = torch::empty({2056, 1480}, options);
  ASSERT_EQ(run(first, nullptr, 1), 0);
  LtTuning one;
  const torch::Tensor y1 = torch::empty_like(first);
  ASSERT_EQ(run(y1, &one, 1), 0);
  EXPECT_EQ(one.size(), 1u);
  EXPECT_EQ(one.tuned_away(), 0u);
  EXPECT_TRUE(torch::equal(y1, first));
  LtTuning most;
  const torch::Tensor y64 = torch::empty_like(first);
  ASSERT_EQ(run(y64, &most, kMaxGemmTuneCandidates), 0);
  EXPECT_EQ(most.size(), 1u);
  EXPECT_LE(most.tuned_away(), 1u);
  const torch::Tensor want = torch::mm(x.to(torch::kDouble), w.to(torch::kDouble).t());
  EXPECT_LE(Excess(y64, want, 2 * RoundingOf(torch::kBFloat16), 776 * std::ldexp(1.0, -23)), 0.0);
  torch::Tensor again = torch::empty_like(first);
  ASSERT_EQ(run(again, &most, 1), 0);  // a remembered problem keeps its algorithm
  EXPECT_TRUE(torch::equal(again, y64));
}

TEST(TunedMmGpuTest, OperandsThatNeedAGradientTakeLibTorch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  const torch::Tensor a = torch::randn({16, 8}, options).requires_grad_(true);
  const torch::Tensor b = torch::randn({8, 24}, options);
  const torch::Tensor y = TunedMm(a, b);
  ASSERT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(a.grad(), b.sum(1).expand({16, 8}), 1e-5, 1e-5));
}
#endif

}  // namespace
}  // namespace mt::kernels::tuned_mm_gpu_test
