// FusedAddLayerNorm with dropout (Megatron's bias-dropout-add inside the LayerNorm kernel: sum =
// x + dropout(residual + residual_bias), x the residual stream) on the GPU. The kernel's masks
// are read back by a call of the same shape from the same generator state with x = 0 and
// residual = 1 (its sum is the mask times 1 / (1 - p)); the real call is then held to the fp32
// chain with those masks, forward and backward, at the tolerances of layer_norm_gpu_test.cc (fp32
// 1e-4 relative + 1e-5 absolute; bf16 / fp16 1e-2 + 1e-2, the column sums 1e-2 x their largest
// entry). Also: the share of kept elements, the same masks from the same seed and others after it,
// a CUDA graph's replay drawing as the eager call, and the CPU fallback.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "worker/kernels/layer_norm.h"
#include "worker/kernels/tensor_error_for_test.h"

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>

#include "worker/kernels/graph_capture_for_test.h"
#endif

namespace mt::kernels::layer_norm_dropout_gpu_test {
namespace {

constexpr double kEps = 1e-5;

// The kernel's keep-mask (1 kept, 0 dropped; fp32) for a call of x's shape after
// torch::cuda::manual_seed(seed).
torch::Tensor KernelMask(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                         double p, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::cuda::manual_seed(seed);
  const auto [sum, y] = FusedAddLayerNorm(torch::zeros_like(x), torch::ones_like(x), w, b, kEps,
                                          /*residual_bias=*/{}, p);
  return (sum.to(torch::kFloat) != 0).to(torch::kFloat);
}

struct Outputs {
  std::vector<torch::Tensor> v;  // sum, y, d x, d residual, d weight, d bias, d residual bias
};

Outputs RunBranch(bool fused, const torch::Tensor& x0, const torch::Tensor& r0,
                  const torch::Tensor& w0, const torch::Tensor& b0, const torch::Tensor& rb0,
                  const torch::Tensor& mask, double p, uint64_t seed, const torch::Tensor& dy,
                  const torch::Tensor& dsum) {
  auto leaf = [](const torch::Tensor& t) { return t.detach().clone().requires_grad_(true); };
  auto x = leaf(x0), r = leaf(r0), w = leaf(w0), b = leaf(b0), rb = leaf(rb0);
  torch::Tensor sum, y;
  if (fused) {
    torch::cuda::manual_seed(seed);
    std::tie(sum, y) = FusedAddLayerNorm(x, r, w, b, kEps, rb, p);
  } else {
    sum = x + (r + rb) * mask / (1.0 - p);
    y = torch::layer_norm(sum, {x.size(-1)}, w, b, kEps);
  }
  torch::autograd::backward({sum, y}, {dsum.to(sum.scalar_type()), dy.to(y.scalar_type())});
  auto f = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat); };
  return {{f(sum), f(y), f(x.grad()), f(r.grad()), f(w.grad()), f(b.grad()), f(rb.grad())}};
}

class FusedDropoutLayerNormGpuTest : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(FusedDropoutLayerNormGpuTest, MatchesTheChainWithTheKernelsMasks) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dtype = GetParam();
  const bool fp32 = dtype == torch::kFloat;
  const char* names[] = {"sum", "y", "d x", "d residual", "d weight", "d bias", "d residual bias"};
  torch::manual_seed(5);
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  for (int64_t hidden : {768, 1024, 2048, 8192, 100}) {
    for (int64_t rows : {300, 7}) {
      for (double p : {0.1, 0.5}) {
        const uint64_t seed = 1000 + hidden + rows;
        auto x = (torch::randn({rows, hidden}, cuda) * 2 + 0.5).to(dtype);
        auto r = torch::randn({rows, hidden}, cuda).to(dtype);
        auto w = (torch::rand({hidden}, cuda) + 0.5).to(dtype);
        auto b = (torch::randn({hidden}, cuda) * 0.1).to(dtype);
        auto rb = torch::randn({hidden}, cuda).to(dtype);
        auto dy = torch::randn({rows, hidden}, cuda).to(dtype);
        auto dsum = torch::randn({rows, hidden}, cuda).to(dtype);
        ASSERT_TRUE(FusedLayerNormAvailable(x, w));
        const torch::Tensor mask = KernelMask(x, w, b, p, seed);
        const double kept = mask.mean().item<double>();
        ASSERT_GT(kept, 0.0) << "hidden " << hidden;
        ASSERT_LT(kept, 1.0) << "hidden " << hidden;
        auto to32 = [](const torch::Tensor& t) { return t.to(torch::kFloat); };
        const Outputs want = RunBranch(false, to32(x), to32(r), to32(w), to32(b), to32(rb), mask, p,
                                       seed, to32(dy), to32(dsum));
        const Outputs got = RunBranch(true, x, r, w, b, rb, mask, p, seed, dy, dsum);
        for (int i = 0; i < 7; ++i) {
          const bool column_sum = i >= 4;
          const double scale = column_sum ? want.v[i].abs().max().item<double>() : 1.0;
          const double rtol = fp32 ? 1e-4 : 1e-2;
          const double atol = fp32 ? 1e-5 * scale : 1e-2 * scale;
          EXPECT_LE(Excess(got.v[i], want.v[i], rtol, atol), 0.0)
              << names[i] << " hidden " << hidden << " rows " << rows << " p " << p;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedDropoutLayerNormGpuTest,
                         ::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf));

// About 1 - p of the elements kept (within 6 standard deviations of the binomial); the same
// seed draws the same masks, the next call (no reseed) others, another seed others.
TEST(FusedDropoutLayerNormGpu, KeepsOneMinusPAndDrawsFromTheGenerator) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto opts = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  const int64_t rows = 4096, hidden = 1024;
  const auto x = torch::zeros({rows, hidden}, opts), r = torch::ones({rows, hidden}, opts);
  const auto w = torch::ones({hidden}, opts), b = torch::zeros({hidden}, opts);
  torch::NoGradGuard no_grad;
  for (double p : {0.1, 0.3}) {
    torch::cuda::manual_seed(77);
    const torch::Tensor first = FusedAddLayerNorm(x, r, w, b, kEps, {}, p).first;
    const torch::Tensor second = FusedAddLayerNorm(x, r, w, b, kEps, {}, p).first;
    torch::cuda::manual_seed(77);
    const torch::Tensor again = FusedAddLayerNorm(x, r, w, b, kEps, {}, p).first;
    torch::cuda::manual_seed(78);
    const torch::Tensor other = FusedAddLayerNorm(x, r, w, b, kEps, {}, p).first;
    EXPECT_TRUE(torch::equal(first, again)) << "p " << p;
    EXPECT_FALSE(torch::equal(first, second)) << "p " << p;
    EXPECT_FALSE(torch::equal(first, other)) << "p " << p;
    const auto f = first.to(torch::kFloat);
    const double n = static_cast<double>(rows * hidden);
    const double kept = (f != 0).sum().item<double>();
    const double sd = std::sqrt(n * p * (1 - p));
    EXPECT_LE(std::abs(kept - n * (1 - p)), 6 * sd) << "kept " << kept << " of " << n;
    // Every kept element is 1 / (1 - p) in bf16.
    const float scale = torch::tensor(1.0 / (1.0 - p)).to(torch::kBFloat16).item<float>();
    EXPECT_EQ(((f != 0) & (f != scale)).sum().item<int64_t>(), 0) << "p " << p;
    // Adjacent elements are not drawn alike (a mask repeated across 4-element quads or rows
    // would show here).
    const auto m = (f != 0).to(torch::kFloat);
    EXPECT_FALSE(torch::equal(m.narrow(1, 0, 4), m.narrow(1, 4, 4)));
    EXPECT_FALSE(torch::equal(m.narrow(0, 0, 1), m.narrow(0, 1, 1)));
  }
}

#if MT_KERNELS_WITH_CUDA
// A CUDA graph's replay after manual_seed(s) draws what the eager call after manual_seed(s)
// draws, forward and backward (the residual's gradient is the sum's times the masks), replay
// after replay.
TEST(FusedDropoutLayerNormGpu, ACapturedCallDrawsAsTheEagerCall) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto opts = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  const int64_t rows = 64, hidden = 768;
  torch::manual_seed(3);
  const auto x = torch::randn({rows, hidden}, opts);
  const auto r = torch::randn({rows, hidden}, opts).requires_grad_(true);
  const auto w = torch::ones({hidden}, opts), b = torch::zeros({hidden}, opts);
  const auto dy = torch::randn({rows, hidden}, opts);
  auto run = [&] {
    r.mutable_grad() = torch::Tensor();
    const auto [sum, y] = FusedAddLayerNorm(x, r, w, b, kEps, {}, 0.2);
    y.backward(dy);
    return torch::cat({sum.detach(), r.grad()});
  };
  at::cuda::CUDAGraph graph;
  const torch::Tensor captured = CaptureForTest(run, graph);
  for (uint64_t seed : {11u, 12u, 11u}) {
    torch::cuda::manual_seed(seed);
    const torch::Tensor eager = run().clone();
    torch::cuda::manual_seed(seed);
    graph.replay();
    torch::cuda::synchronize();
    EXPECT_TRUE(torch::equal(captured, eager)) << "seed " << seed;
  }
}
#endif

// On the CPU: LibTorch's dropout of residual + residual_bias before x (each element of the sum
// minus x is 0 or (residual + bias) / (1 - p)); p = 0 is the plain sum; p outside
// [0, 1) is an error that names dropout_p.
TEST(FusedLayerNormCpu, DropoutFallsBackToTorch) {
  torch::manual_seed(4);
  const auto x = torch::randn({6, 32}, torch::kDouble), r = torch::randn({6, 32}, torch::kDouble);
  const auto w = torch::ones({32}, torch::kDouble), b = torch::zeros({32}, torch::kDouble);
  const auto rb = torch::randn({32}, torch::kDouble);
  const double p = 0.25;
  const auto [sum, y] = FusedAddLayerNorm(x, r, w, b, kEps, rb, p);
  const auto branch = sum - x, full = (r + rb) / (1 - p);
  const auto kept = (branch - full).abs() < 1e-12, dropped = branch.abs() < 1e-12;
  EXPECT_TRUE((kept | dropped).all().item<bool>());
  EXPECT_TRUE(kept.any().item<bool>());
  EXPECT_TRUE(dropped.any().item<bool>());
  EXPECT_TRUE(torch::allclose(y, torch::layer_norm(sum, {32}, w, b, kEps), 1e-12, 1e-12));
  EXPECT_TRUE(torch::equal(FusedAddLayerNorm(x, r, w, b, kEps, rb, 0.0).first, x + r + rb));
  for (double bad : {-0.1, 1.0}) {
    try {
      FusedAddLayerNorm(x, r, w, b, kEps, rb, bad);
      ADD_FAILURE() << "dropout_p " << bad << " was accepted";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("dropout_p must be in [0, 1)"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace mt::kernels::layer_norm_dropout_gpu_test
