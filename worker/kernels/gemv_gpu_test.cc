// Gemv on the GPU against a double-precision reference on the same (rounded) weight: both
// kernels (gemv_kernel.cu) at every row count they take (CUDA cores: 1 row, and 1 to 4 in fp32;
// tensor cores: 2 to 8 in bf16 / fp16), with and without bias and GELU, at the decode shapes of
// GPT-2 124M and 1.3B (768 / 2048 / 8192 in; 3 h, 4 h and h out), at widths that leave warps or
// a tile's features idle (out 20, 40, 8200), that end inside a group of loads or a pass (in
// 264), that take more than one pass of a block's warps (in 16,400), and LibTorch's linear past
// them (9+ rows, 5+ in fp32, autograd, a non-contiguous weight); where it applies; and a chain
// of dependent launches
// captured in a CUDA graph. Tolerances: fp32 1e-4 relative + 1e-4 absolute (sums in another
// order); bf16 / fp16 the dtype's rounding of outputs that are O(1): 1e-2 relative + 2e-2
// absolute.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "worker/kernels/gemv.h"
#include "worker/kernels/layer_norm.h"
#include "worker/kernels/linear_tolerance_for_test.h"

#if MT_KERNELS_WITH_CUDA
#include "worker/kernels/graph_capture_for_test.h"
#endif

namespace mt::kernels::gemv_gpu_test {
namespace {

struct Shape {
  int64_t rows, in, out;
};

class GemvGpuTest : public ::testing::TestWithParam<torch::ScalarType> {};

#if MT_KERNELS_WITH_CUDA
// Captures `chain` (dependent launches reading x) in a CUDA graph, then three times draws a new
// x in place, replays, and expects the graph's output to equal `chain` run eagerly, bit for bit
// (no kernel read its input before the one before it wrote it); `also` checks more of the
// output after each replay.
void ExpectReplaysEqualTheEagerChain(const std::function<torch::Tensor()>& chain,
                                     const torch::Tensor& x, const std::string& what,
                                     const std::function<void(const torch::Tensor&)>& also = {}) {
  at::cuda::CUDAGraph graph;
  const torch::Tensor out = CaptureForTest(chain, graph);
  for (int replay = 0; replay < 3; ++replay) {
    x.copy_(torch::randn(x.sizes(), x.options().dtype(torch::kFloat)));
    graph.replay();
    torch::cuda::synchronize();
    EXPECT_TRUE(torch::equal(out, chain())) << what << " replay " << replay;
    if (also) also(out);
  }
}
#endif

TEST_P(GemvGpuTest, MatchesADoublePrecisionReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::ScalarType dtype = GetParam();
  const auto on = torch::TensorOptions().device(torch::kCUDA);
  const std::vector<Shape> shapes = {
      {1, 768, 2304},  {2, 768, 3072}, {3, 2048, 6144}, {4, 8192, 2048}, {1, 2048, 8200},
      {4, 768, 20},    {1, 264, 40},   {2, 16400, 24},  {1, 16400, 24},  {5, 2048, 8200},
      {8, 768, 2304},  {7, 264, 40},   {6, 768, 3072},  {8, 8192, 2048}, {5, 16400, 24},
      {9, 2048, 2048}, {16, 768, 768}};
  const int64_t max_rows = dtype == torch::kFloat ? 4 : 8;
  torch::manual_seed(13);
  torch::NoGradGuard no_grad;
  for (const Shape& s : shapes) {
    // Weights of GPT-2's init scale; inputs O(1) as after a LayerNorm.
    const torch::Tensor w = (torch::randn({s.out, s.in}, on) * 0.02).to(dtype);
    const torch::Tensor x = torch::randn({s.rows, s.in}, on).to(dtype);
    const torch::Tensor bias = (torch::randn({s.out}, on) * 0.1).to(dtype);
    ASSERT_EQ(GemvAvailable(x, w), s.rows <= max_rows) << s.rows << "x" << s.in;
    const torch::Tensor linear = torch::matmul(x.to(torch::kDouble), w.to(torch::kDouble).t());
    for (const bool with_bias : {false, true}) {
      for (const bool gelu : {false, true}) {
        torch::Tensor want = with_bias ? linear + bias.to(torch::kDouble) : linear;
        if (gelu) want = torch::gelu(want, "tanh");
        const torch::Tensor got = Gemv(x, w, with_bias ? bias : torch::Tensor(), gelu);
        ASSERT_EQ(got.scalar_type(), dtype);
        ASSERT_EQ(got.sizes(), (std::vector<int64_t>{s.rows, s.out}));
        EXPECT_LE(LinearExcess(got, want, dtype), 0.0)
            << "rows " << s.rows << " in " << s.in << " out " << s.out << " bias " << with_bias
            << " gelu " << gelu;
      }
    }
  }
}

TEST_P(GemvGpuTest, KeepsLeadingDimensionsAndAgreesWithLibTorch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::ScalarType dtype = GetParam();
  const auto on = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(14);
  torch::NoGradGuard no_grad;
  const torch::Tensor w = (torch::randn({3072, 768}, on) * 0.02).to(dtype);
  const torch::Tensor bias = (torch::randn({3072}, on) * 0.1).to(dtype);
  // [2, 1, 768]: a decode step's shape (batch 2, one token).
  const torch::Tensor x = torch::randn({2, 1, 768}, on).to(dtype);
  const torch::Tensor got = Gemv(x, w, bias, /*gelu=*/true);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{2, 1, 3072}));
  const torch::Tensor want =
      torch::gelu(torch::nn::functional::linear(x.to(torch::kDouble), w.to(torch::kDouble),
                                                bias.to(torch::kDouble)),
                  "tanh");
  EXPECT_LE(LinearExcess(got, want, dtype), 0.0);
}

// Three layers in a row, each reading the one before's output, captured once and replayed on
// new inputs: every kernel is a dependent launch that may start before the one before it ends,
// and must still read that one's output, not the stale buffer.
TEST_P(GemvGpuTest, DependentLaunchesInACudaGraphReadTheirInputsAfterTheyAreWritten) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
#if MT_KERNELS_WITH_CUDA
  const torch::ScalarType dtype = GetParam();
  const auto on = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(17);
  torch::NoGradGuard no_grad;
  for (const int64_t rows : {int64_t{1}, int64_t{4}, int64_t{8}}) {
    if (dtype == torch::kFloat && rows > 4) continue;
    const torch::Tensor w1 = (torch::randn({8192, 2048}, on) * 0.02).to(dtype);
    const torch::Tensor w2 = (torch::randn({2048, 8192}, on) * 0.02).to(dtype);
    const torch::Tensor w3 = (torch::randn({6144, 2048}, on) * 0.02).to(dtype);
    const torch::Tensor b1 = (torch::randn({8192}, on) * 0.1).to(dtype);
    const torch::Tensor x = torch::randn({rows, 2048}, on).to(dtype);
    auto chain = [&] { return Gemv(Gemv(Gemv(x, w1, b1, /*gelu=*/true), w2, {}), w3, {}); };
    ExpectReplaysEqualTheEagerChain(chain, x, "rows " + std::to_string(rows), [&](const auto& out) {
      const torch::Tensor exact = torch::matmul(
          torch::matmul(
              torch::gelu(torch::nn::functional::linear(x.to(torch::kDouble), w1.to(torch::kDouble),
                                                        b1.to(torch::kDouble)),
                          "tanh")
                  .to(dtype)
                  .to(torch::kDouble),
              w2.to(torch::kDouble).t())
              .to(dtype)
              .to(torch::kDouble),
          w3.to(torch::kDouble).t());
      EXPECT_LE(LinearExcess(out, exact, dtype), 0.0) << "rows " << rows;
    });
  }
#else
  GTEST_SKIP() << "a build without CUDA LibTorch";
#endif
}

// LayerNorm(x + residual) in double from the rounded sum, rounded to the dtype as the kernels
// store it: the input NormGemv's linear layer reads.
torch::Tensor NormalizedReference(const torch::Tensor& sum, const torch::Tensor& w,
                                  const torch::Tensor& b, double eps) {
  const torch::Tensor s = sum.to(torch::kDouble);
  const torch::Tensor mean = s.mean(-1, true);
  const torch::Tensor var = (s - mean).pow(2).mean(-1, true);
  return ((s - mean) / (var + eps).sqrt() * w.to(torch::kDouble) + b.to(torch::kDouble))
      .to(sum.scalar_type());
}

// The input LayerNorm inside the kernel (one row at the decode shapes of 124M and 1.3B, the
// logits of 50,304, widths that leave threads idle, with and without a residual, bias and
// GELU): the sum equals the LayerNorm kernel's exactly, and the output holds the linear
// tolerance against a double reference that reads the normalised x rounded to the dtype; past
// one row or a block's shared memory (16,400 wide) the LayerNorm kernel and Gemv, with the same
// results.
TEST_P(GemvGpuTest, NormGemvNormalisesTheRowsInsideTheKernel) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::ScalarType dtype = GetParam();
  const auto on = torch::TensorOptions().device(torch::kCUDA);
  const std::vector<Shape> shapes = {{1, 768, 2304},  {1, 2048, 6144}, {1, 2048, 8192},
                                     {1, 768, 50304}, {1, 264, 40},    {1, 16400, 24},
                                     {3, 2048, 8192}, {8, 2048, 6144}};
  const int64_t max_rows = dtype == torch::kFloat ? 4 : 8;
  const double eps = 1e-5;
  torch::manual_seed(18);
  torch::NoGradGuard no_grad;
  for (const Shape& s : shapes) {
    if (s.rows > max_rows) continue;
    const torch::Tensor w = (torch::randn({s.out, s.in}, on) * 0.02).to(dtype);
    const torch::Tensor bias = (torch::randn({s.out}, on) * 0.1).to(dtype);
    const torch::Tensor ln_w = (1.0 + 0.1 * torch::randn({s.in}, on)).to(dtype);
    const torch::Tensor ln_b = (0.1 * torch::randn({s.in}, on)).to(dtype);
    // A residual stream with an offset and a scale the LayerNorm takes out.
    const torch::Tensor x = (3.0 + 2.0 * torch::randn({s.rows, 1, s.in}, on)).to(dtype);
    const torch::Tensor r = torch::randn({s.rows, 1, s.in}, on).to(dtype);
    const bool fits = s.rows == 1 && s.in < 16400;
    EXPECT_EQ(NormGemvAvailable(x, ln_w, w), fits) << s.rows << "x" << s.in;
    for (const bool with_residual : {false, true}) {
      const torch::Tensor residual = with_residual ? r : torch::Tensor();
      const auto [want_sum, normed] = with_residual
                                          ? FusedAddLayerNorm(x, r, ln_w, ln_b, eps)
                                          : std::make_pair(x, FusedLayerNorm(x, ln_w, ln_b, eps));
      const torch::Tensor ref_in = NormalizedReference(want_sum, ln_w, ln_b, eps);
      for (const bool gelu : {false, true}) {
        const torch::Tensor b = gelu ? bias : torch::Tensor();
        const auto [sum, got] = NormGemv(x, residual, ln_w, ln_b, eps, w, b, gelu);
        EXPECT_TRUE(torch::equal(sum, want_sum)) << s.rows << "x" << s.in;
        ASSERT_EQ(got.sizes(), (std::vector<int64_t>{s.rows, 1, s.out}));
        torch::Tensor want =
            torch::nn::functional::linear(ref_in.to(torch::kDouble), w.to(torch::kDouble),
                                          gelu ? bias.to(torch::kDouble) : torch::Tensor());
        if (gelu) want = torch::gelu(want, "tanh");
        EXPECT_LE(LinearExcess(got, want, dtype), 0.0)
            << "rows " << s.rows << " in " << s.in << " out " << s.out << " residual "
            << with_residual << " gelu " << gelu;
        EXPECT_LE(LinearExcess(got, Gemv(normed, w, b, gelu), dtype), 0.0);
      }
    }
  }
}

// A decode step's chain of NormGemvs at batch 1 (each adding the one before's output to the sum
// the one before wrote), captured in a CUDA graph and replayed on new inputs: it equals the
// eager chain bit for bit, so no kernel read a sum or an output before it was written.
TEST_P(GemvGpuTest, NormGemvChainsInACudaGraph) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
#if MT_KERNELS_WITH_CUDA
  const torch::ScalarType dtype = GetParam();
  const auto on = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(19);
  torch::NoGradGuard no_grad;
  const int64_t rows = 1;
  std::vector<torch::Tensor> ws, ln_ws, ln_bs;
  for (int i = 0; i < 4; ++i) {
    ws.push_back((torch::randn({2048, 2048}, on) * 0.02).to(dtype));
    ln_ws.push_back((1.0 + 0.1 * torch::randn({2048}, on)).to(dtype));
    ln_bs.push_back((0.1 * torch::randn({2048}, on)).to(dtype));
  }
  const torch::Tensor x = torch::randn({rows, 2048}, on).to(dtype);
  auto chain = [&] {
    torch::Tensor h = x, y;
    for (int i = 0; i < 4; ++i) {
      std::tie(h, y) = NormGemv(h, y, ln_ws[i], ln_bs[i], 1e-5, ws[i], {}, i % 2 == 1);
    }
    return torch::cat({h, y}, -1);
  };
  ExpectReplaysEqualTheEagerChain(chain, x, "NormGemv chain");
#else
  GTEST_SKIP() << "a build without CUDA LibTorch";
#endif
}

TEST(GemvGpuTest, LeavesAutogradAndOtherLayoutsToLibTorch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto on = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(15);
  torch::Tensor w = (torch::randn({64, 128}, on) * 0.02).requires_grad_(true);
  const torch::Tensor x = torch::randn({1, 128}, on);
  // Autograd would record: LibTorch's linear, and its gradient reaches the weight.
  EXPECT_FALSE(GemvAvailable(x, w));
  Gemv(x, w, torch::Tensor()).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(torch::allclose(w.grad(), x.expand({64, 128}), 1e-6, 1e-6));
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(GemvAvailable(x, w));
  // A transposed (non-contiguous) weight, another dtype, a width off the 16-byte vectors, the
  // CPU: not the kernel.
  const torch::Tensor wt = torch::randn({128, 64}, on).t();
  EXPECT_FALSE(GemvAvailable(x, wt));
  EXPECT_TRUE(torch::allclose(Gemv(x, wt, torch::Tensor()), torch::matmul(x, wt.t()), 1e-5, 1e-5));
  EXPECT_FALSE(GemvAvailable(x.to(torch::kBFloat16), w));
  EXPECT_FALSE(GemvAvailable(torch::randn({1, 6}, on), torch::randn({4, 6}, on)));
  EXPECT_FALSE(GemvAvailable(x.cpu(), w.cpu()));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemvGpuTest,
                         ::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf));

// The CPU: LibTorch's linear and GELU, exactly.
TEST(GemvCpu, FallsBackToLibTorch) {
  torch::manual_seed(16);
  const torch::Tensor x = torch::randn({2, 32}, torch::kDouble);
  const torch::Tensor w = torch::randn({8, 32}, torch::kDouble);
  const torch::Tensor b = torch::randn({8}, torch::kDouble);
  EXPECT_FALSE(GemvAvailable(x, w));
  EXPECT_TRUE(torch::equal(Gemv(x, w, b, /*gelu=*/true),
                           torch::gelu(torch::nn::functional::linear(x, w, b), "tanh")));
}

// The CPU: the LayerNorm (with the residual added first) and then the linear layer.
TEST(GemvCpu, NormGemvFallsBackToTheLayerNormAndTheLinearLayer) {
  torch::manual_seed(20);
  const torch::Tensor x = torch::randn({2, 1, 32}, torch::kDouble);
  const torch::Tensor r = torch::randn({2, 1, 32}, torch::kDouble);
  const torch::Tensor w = torch::randn({8, 32}, torch::kDouble);
  const torch::Tensor b = torch::randn({8}, torch::kDouble);
  const torch::Tensor ln_w = torch::randn({32}, torch::kDouble);
  const torch::Tensor ln_b = torch::randn({32}, torch::kDouble);
  EXPECT_FALSE(NormGemvAvailable(x, ln_w, w));
  const auto [sum, y] = NormGemv(x, r, ln_w, ln_b, 1e-5, w, b, /*gelu=*/true);
  EXPECT_TRUE(torch::equal(sum, x + r));
  const torch::Tensor normed = torch::layer_norm(x + r, {32}, ln_w, ln_b, 1e-5);
  EXPECT_TRUE(torch::allclose(y, torch::gelu(torch::nn::functional::linear(normed, w, b), "tanh"),
                              1e-12, 1e-12));
  const auto [same, y2] = NormGemv(x, torch::Tensor(), ln_w, ln_b, 1e-5, w, torch::Tensor());
  EXPECT_TRUE(torch::equal(same, x));
  EXPECT_TRUE(torch::allclose(
      y2, torch::nn::functional::linear(torch::layer_norm(x, {32}, ln_w, ln_b, 1e-5), w), 1e-12,
      1e-12));
  EXPECT_THROW(NormGemv(x, r.view({1, 2, 32}), ln_w, ln_b, 1e-5, w, b), c10::Error);
}

}  // namespace
}  // namespace mt::kernels::gemv_gpu_test
