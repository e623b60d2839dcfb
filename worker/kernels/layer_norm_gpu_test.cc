// The fused LayerNorm kernels against LibTorch's unfused chain (x + residual, layer_norm) on the
// GPU, forward and backward, for 300 rows (more than a block's, not a multiple of them), 7 rows
// and one row (the decode step's: the forward spreads a row over 8 warps), hidden sizes on the
// register kernels (768, 1024, 2048, 4096: groups of 1 to 8 warps a row; in backward the staged
// kernel, except fp32 at 4096, whose staged rows leave room for one block an SM, which takes the
// register kernel) and on the streaming ones (8192: over 48 KB of shared memory in backward; 100:
// no 16-byte vectors). 300 rows take two of the staged kernel's stages or more. The reference
// runs in fp32 on the same (rounded) inputs.
// Tolerances: fp32 1e-4 relative + 1e-5 absolute (sums in another order); bf16 / fp16 the
// dtype's rounding of the result, 1e-2 relative + 1e-2 absolute on values that are O(1)
// (y, d input), and for d weight / d bias (sums over 300 rows) 1e-2 relative + 1e-2 x the
// largest entry; LibTorch's own bf16 / fp16 kernels meet the same bounds (checked too).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "worker/kernels/layer_norm.h"

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "worker/kernels/kind_of.h"
#include "worker/kernels/layer_norm_launch.h"
#endif

namespace mt::kernels {
namespace {

struct Grads {
  std::vector<torch::Tensor> values;  // sum (or y twice), y, dx, dresidual, dweight, dbias
};

// fp32 copies of everything the chain produces, from inputs rounded to `dtype`.
Grads RunChain(bool fused, bool add, const torch::Tensor& x0, const torch::Tensor& r0,
               const torch::Tensor& w0, const torch::Tensor& b0, const torch::Tensor& dy,
               const torch::Tensor& dsum) {
  auto x = x0.detach().clone().requires_grad_(true);
  auto r = r0.detach().clone().requires_grad_(true);
  auto w = w0.detach().clone().requires_grad_(true);
  auto b = b0.detach().clone().requires_grad_(true);
  const double eps = 1e-5;
  torch::Tensor sum, y;
  if (add) {
    if (fused) {
      std::tie(sum, y) = FusedAddLayerNorm(x, r, w, b, eps);
    } else {
      sum = x + r;
      y = torch::layer_norm(sum, {x.size(-1)}, w, b, eps);
    }
    torch::autograd::backward({sum, y}, {dsum.to(sum.scalar_type()), dy.to(y.scalar_type())});
  } else {
    y = fused ? FusedLayerNorm(x, w, b, eps) : torch::layer_norm(x, {x.size(-1)}, w, b, eps);
    sum = y;
    y.backward(dy.to(y.scalar_type()));
  }
  auto f = [](const torch::Tensor& t) {
    return t.defined() ? t.detach().to(torch::kFloat) : torch::Tensor();
  };
  return {{f(sum), f(y), f(x.grad()), add ? f(r.grad()) : f(x.grad()), f(w.grad()), f(b.grad())}};
}

double Excess(const torch::Tensor& got, const torch::Tensor& want, double rtol, double atol) {
  return ((got - want).abs() - (atol + rtol * want.abs())).max().item<double>();
}

class FusedLayerNormGpuTest : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(FusedLayerNormGpuTest, MatchesTorchForwardAndBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dtype = GetParam();
  const bool fp32 = dtype == torch::kFloat;
  const char* names[] = {"sum", "y", "d x", "d residual", "d weight", "d bias"};
  torch::manual_seed(21);
  const std::pair<int64_t, int64_t> shapes[] = {{3, 100}, {1, 7}, {1, 1}};
  for (int64_t hidden : {768, 1024, 2048, 4096, 8192, 100}) {
    for (const auto& [b, s] : shapes) {
      for (bool add : {false, true}) {
        const auto cuda = torch::TensorOptions(torch::kCUDA);
        auto x = (torch::randn({b, s, hidden}, cuda) * 2 + 0.5).to(dtype);
        auto r = torch::randn({b, s, hidden}, cuda).to(dtype);
        auto w = (torch::rand({hidden}, cuda) + 0.5).to(dtype);
        auto bias = (torch::randn({hidden}, cuda) * 0.1).to(dtype);
        auto dy = torch::randn({b, s, hidden}, cuda);
        auto dsum = torch::randn({b, s, hidden}, cuda);
        ASSERT_TRUE(FusedLayerNormAvailable(x, w));
        auto to32 = [](const torch::Tensor& t) { return t.to(torch::kFloat); };
        const Grads want = RunChain(false, add, to32(x), to32(r), to32(w), to32(bias),
                                    to32(dy.to(dtype)), to32(dsum.to(dtype)));
        const Grads got = RunChain(true, add, x, r, w, bias, dy, dsum);
        const Grads torch_same = RunChain(false, add, x, r, w, bias, dy, dsum);
        for (int i = 0; i < 6; ++i) {
          const bool param = i >= 4;
          const double scale = param ? want.values[i].abs().max().item<double>() : 1.0;
          const double rtol = fp32 ? 1e-4 : 1e-2;
          const double atol = fp32 ? 1e-5 * scale : 1e-2 * scale;
          const std::string what = std::string(names[i]) + " hidden " + std::to_string(hidden) +
                                   " rows " + std::to_string(b * s) + (add ? " with residual" : "");
          EXPECT_LE(Excess(got.values[i], want.values[i], rtol, atol), 0.0) << what;
          EXPECT_LE(Excess(torch_same.values[i], want.values[i], rtol, atol), 0.0)
              << "LibTorch's own: " << what;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedLayerNormGpuTest,
                         ::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf));

#if MT_KERNELS_WITH_CUDA
// dx, d weight and d bias of LaunchLayerNormBackward on one path.
std::vector<torch::Tensor> BackwardOn(LayerNormBackwardPath path, const torch::Tensor& dy,
                                      const torch::Tensor& x, const torch::Tensor& mean,
                                      const torch::Tensor& rstd, const torch::Tensor& w,
                                      const torch::Tensor& dsum) {
  const int64_t rows = x.size(0), hidden = x.size(1);
  torch::Tensor dx = torch::empty_like(x), dw = torch::empty_like(w), db = torch::empty_like(w);
  torch::Tensor partial =
      torch::empty({2 * LayerNormBackwardBlocks(rows), hidden}, x.options().dtype(torch::kFloat));
  const cudaError_t err = LaunchLayerNormBackward(
      KindOf(x.scalar_type()), dy.data_ptr(), x.data_ptr(), mean.data_ptr<float>(),
      rstd.data_ptr<float>(), w.data_ptr(), dsum.defined() ? dsum.data_ptr() : nullptr,
      dx.data_ptr(), dw.data_ptr(), db.data_ptr(), partial.data_ptr<float>(), rows, hidden,
      at::cuda::getCurrentCUDAStream().stream(), path);
  EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  return {dx, dw, db};
}

// The staged backward (rows copied into shared memory ahead of use) against the register one,
// forced through LaunchLayerNormBackward's path, for groups of 1, 2, 4 and 8 warps a row, with and
// without dsum: bit for bit. Each row's arithmetic is the same, and 1,000 rows take 125 blocks,
// fewer than the staged kernel's resident blocks on a GPU of 125 SMs or more, so both run the same
// grid and add the same rows to the same sums in the same order. kAuto gives the same bits too.
TEST(FusedLayerNormGpu, StagedAndRegisterBackwardAgreeBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(23);
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  const int64_t rows = 1000;
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kFloat}) {
    // bf16: groups of 1, 2, 2, 4, 8 warps; fp32: 1, 4, 4, 8 (4,096 fp32 takes the streaming one).
    for (int64_t hidden : {256, 768, 1024, 2048, 4096}) {
      if (dtype == torch::kFloat && hidden == 4096) continue;
      const torch::Tensor x = (torch::randn({rows, hidden}, cuda) * 2 + 0.5).to(dtype);
      const torch::Tensor xf = x.to(torch::kFloat);
      const torch::Tensor mean = xf.mean(1);
      const torch::Tensor rstd = torch::rsqrt(xf.var(1, /*unbiased=*/false) + 1e-5);
      const torch::Tensor w = (torch::rand({hidden}, cuda) + 0.5).to(dtype);
      const torch::Tensor dy = torch::randn({rows, hidden}, cuda).to(dtype);
      for (bool with_dsum : {false, true}) {
        const torch::Tensor dsum =
            with_dsum ? torch::randn({rows, hidden}, cuda).to(dtype) : torch::Tensor();
        const auto reg = BackwardOn(LayerNormBackwardPath::kRegister, dy, x, mean, rstd, w, dsum);
        const auto staged = BackwardOn(LayerNormBackwardPath::kStaged, dy, x, mean, rstd, w, dsum);
        const auto automatic = BackwardOn(LayerNormBackwardPath::kAuto, dy, x, mean, rstd, w, dsum);
        const char* names[] = {"d x", "d weight", "d bias"};
        for (int i = 0; i < 3; ++i) {
          const std::string what = std::string(names[i]) + " " + c10::toString(dtype) + " hidden " +
                                   std::to_string(hidden) + (with_dsum ? " with dsum" : "");
          EXPECT_TRUE(torch::equal(staged[i], reg[i]))
              << what << ": max diff " << (staged[i] - reg[i]).abs().max().item<double>();
          EXPECT_TRUE(torch::equal(automatic[i], reg[i])) << what << " (auto)";
        }
      }
    }
  }
}
#endif

TEST(FusedLayerNormCpu, FallsBackToTorch) {
  torch::manual_seed(2);
  auto x = torch::randn({4, 5, 32}, torch::kDouble);
  auto r = torch::randn({4, 5, 32}, torch::kDouble);
  auto w = torch::rand({32}, torch::kDouble);
  auto b = torch::randn({32}, torch::kDouble);
  EXPECT_FALSE(FusedLayerNormAvailable(x, w));
  const auto [sum, y] = FusedAddLayerNorm(x, r, w, b, 1e-5);
  EXPECT_TRUE(torch::equal(sum, x + r));
  EXPECT_TRUE(torch::equal(y, torch::layer_norm(x + r, {32}, w, b, 1e-5)));
  EXPECT_TRUE(torch::equal(FusedLayerNorm(x, w, b, 1e-5), torch::layer_norm(x, {32}, w, b, 1e-5)));
}

}  // namespace
}  // namespace mt::kernels
