// The fused LayerNorm kernels against LibTorch's unfused chain (x + residual, layer_norm) on the
// GPU, forward and backward, for 300 rows (more than a block's, not a multiple of them), 7 rows
// and one row (the decode step's: the forward spreads a row over 8 warps), hidden sizes on the
// register kernels (768, 1024, 2048, 4096: groups of 1 to 8 warps a row) and on the streaming
// ones (8192: over 48 KB of shared memory in backward; 100: no 16-byte vectors). Each as a plain
// LayerNorm, with a residual, and with a residual and the residual's bias (a linear layer's bias
// left to the LayerNorm: its gradient is the sums of d input's columns). The reference runs in
// fp32 on the same (rounded) inputs.
// Tolerances: fp32 1e-4 relative + 1e-5 absolute (sums in another order); bf16 / fp16 the
// dtype's rounding of the result, 1e-2 relative + 1e-2 absolute on values that are O(1)
// (y, d input), and for d weight / d bias / d residual bias (sums over 300 rows) 1e-2 relative +
// 1e-2 x the largest entry; LibTorch's own bf16 / fp16 kernels meet the same bounds (checked too).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "worker/kernels/layer_norm.h"
#include "worker/kernels/tensor_error_for_test.h"

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "worker/kernels/kind_of.h"
#include "worker/kernels/layer_norm_launch.h"
#endif

namespace mt::kernels::layer_norm_gpu_test {
namespace {

struct Grads {
  // sum (or y twice), y, dx, dresidual, dweight, dbias, d residual bias (or d bias again)
  std::vector<torch::Tensor> values;
};

// fp32 copies of everything the chain produces, from inputs rounded to `dtype`; `rb0` the
// residual's bias, undefined for none.
Grads RunChain(bool fused, bool add, const torch::Tensor& x0, const torch::Tensor& r0,
               const torch::Tensor& w0, const torch::Tensor& b0, const torch::Tensor& dy,
               const torch::Tensor& dsum, const torch::Tensor& rb0 = {}) {
  auto x = x0.detach().clone().requires_grad_(true);
  auto r = r0.detach().clone().requires_grad_(true);
  auto w = w0.detach().clone().requires_grad_(true);
  auto b = b0.detach().clone().requires_grad_(true);
  const bool with_rb = rb0.defined();
  auto rb = with_rb ? rb0.detach().clone().requires_grad_(true) : torch::Tensor();
  const double eps = 1e-5;
  torch::Tensor sum, y;
  if (add) {
    if (fused) {
      std::tie(sum, y) = FusedAddLayerNorm(x, r, w, b, eps, rb);
    } else {
      sum = with_rb ? x + r + rb : x + r;
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
  return {{f(sum), f(y), f(x.grad()), add ? f(r.grad()) : f(x.grad()), f(w.grad()), f(b.grad()),
           with_rb ? f(rb.grad()) : f(b.grad())}};
}

class FusedLayerNormGpuTest : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(FusedLayerNormGpuTest, MatchesTorchForwardAndBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dtype = GetParam();
  const bool fp32 = dtype == torch::kFloat;
  const char* names[] = {"sum", "y", "d x", "d residual", "d weight", "d bias", "d residual bias"};
  torch::manual_seed(21);
  const std::pair<int64_t, int64_t> shapes[] = {{3, 100}, {1, 7}, {1, 1}};
  for (int64_t hidden : {768, 1024, 2048, 4096, 8192, 100}) {
    for (const auto& [b, s] : shapes) {
      // 0: LayerNorm alone; 1: with a residual; 2: with a residual and the residual's bias.
      for (int mode : {0, 1, 2}) {
        const bool add = mode > 0;
        const auto cuda = torch::TensorOptions(torch::kCUDA);
        auto x = (torch::randn({b, s, hidden}, cuda) * 2 + 0.5).to(dtype);
        auto r = torch::randn({b, s, hidden}, cuda).to(dtype);
        auto w = (torch::rand({hidden}, cuda) + 0.5).to(dtype);
        auto bias = (torch::randn({hidden}, cuda) * 0.1).to(dtype);
        auto rb = mode == 2 ? torch::randn({hidden}, cuda).to(dtype) : torch::Tensor();
        auto dy = torch::randn({b, s, hidden}, cuda);
        auto dsum = torch::randn({b, s, hidden}, cuda);
        ASSERT_TRUE(FusedLayerNormAvailable(x, w));
        auto to32 = [](const torch::Tensor& t) {
          return t.defined() ? t.to(torch::kFloat) : torch::Tensor();
        };
        const Grads want = RunChain(false, add, to32(x), to32(r), to32(w), to32(bias),
                                    to32(dy.to(dtype)), to32(dsum.to(dtype)), to32(rb));
        const Grads got = RunChain(true, add, x, r, w, bias, dy, dsum, rb);
        const Grads torch_same = RunChain(false, add, x, r, w, bias, dy, dsum, rb);
        for (int i = 0; i < 7; ++i) {
          const bool param = i >= 4;
          const double scale = param ? want.values[i].abs().max().item<double>() : 1.0;
          const double rtol = fp32 ? 1e-4 : 1e-2;
          const double atol = fp32 ? 1e-5 * scale : 1e-2 * scale;
          const std::string what = std::string(names[i]) + " hidden " + std::to_string(hidden) +
                                   " rows " + std::to_string(b * s) +
                                   (mode == 1   ? " with residual"
                                    : mode == 2 ? " with residual and its bias"
                                                : "");
          EXPECT_LE(Excess(got.values[i], want.values[i], rtol, atol), 0.0) << what;
          // LibTorch's chain with the residual's bias rounds the sum twice (x + r, then + the
          // bias; the model's unfused path too: the bias in the GEMM, then the residual add),
          // the kernel once: LibTorch's own is held to twice the bound there.
          const double twice = mode == 2 && !fp32 ? 2.0 : 1.0;
          EXPECT_LE(Excess(torch_same.values[i], want.values[i], twice * rtol, twice * atol), 0.0)
              << "LibTorch's own: " << what;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedLayerNormGpuTest,
                         ::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf));

#if MT_KERNELS_WITH_CUDA
// dx, d weight and d bias of LaunchLayerNormBackward, and with `residual_bias` the residual
// bias's gradient.
std::vector<torch::Tensor> Backward(const torch::Tensor& dy, const torch::Tensor& x,
                                    const torch::Tensor& mean, const torch::Tensor& rstd,
                                    const torch::Tensor& w, const torch::Tensor& dsum,
                                    bool residual_bias,
                                    LayerNormBackwardPath path = LayerNormBackwardPath::kAuto) {
  const int64_t rows = x.size(0), hidden = x.size(1);
  torch::Tensor dx = torch::empty_like(x), dw = torch::empty_like(w), db = torch::empty_like(w);
  torch::Tensor drb = residual_bias ? torch::empty_like(w) : torch::Tensor();
  torch::Tensor partial =
      torch::empty({LayerNormBackwardSums(residual_bias) * LayerNormBackwardBlocks(rows), hidden},
                   x.options().dtype(torch::kFloat));
  const cudaError_t err = LaunchLayerNormBackward(
      KindOf(x.scalar_type()), dy.data_ptr(), x.data_ptr(), mean.data_ptr<float>(),
      rstd.data_ptr<float>(), w.data_ptr(), dsum.defined() ? dsum.data_ptr() : nullptr,
      dx.data_ptr(), dw.data_ptr(), db.data_ptr(), partial.data_ptr<float>(), rows, hidden,
      at::cuda::getCurrentCUDAStream().stream(), residual_bias ? drb.data_ptr() : nullptr,
      DropoutArgs{}, nullptr, path);
  EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  if (residual_bias) return {dx, dw, db, drb};
  return {dx, dw, db};
}

// The residual bias's gradient (model::GptConfig::fold_linear_bias) is the sums of d x's columns
// as written (fp32 1e-4 relative + 1e-5 x the largest; 16-bit: rounded once, 1e-2 + 1e-2 x the
// largest), and asking for it changes nothing else: d x bit for bit as without it, and d weight
// and d bias too on the staged and register kernels (1 to 8 warps a row: each column summed
// by one thread, in a fixed order); on the streaming kernel (bf16 8,192 and 100 wide, fp32 4,096
// and 100), whose warps add to shared sums with atomics in no fixed order, within the bound
// above. With and without dsum, over 1,000 rows.
TEST(FusedLayerNormGpu, ResidualBiasGradientIsTheColumnSumOfDInput) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(23);
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  const int64_t rows = 1000;
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kFloat}) {
    const bool fp32 = dtype == torch::kFloat;
    for (int64_t hidden : {256, 768, 1024, 2048, 4096, 8192, 100}) {
      if (fp32 && hidden == 8192) continue;  // fp32 4,096 is streaming already
      const torch::Tensor x = (torch::randn({rows, hidden}, cuda) * 2 + 0.5).to(dtype);
      const torch::Tensor xf = x.to(torch::kFloat);
      const torch::Tensor mean = xf.mean(1);
      const torch::Tensor rstd = torch::rsqrt(xf.var(1, /*unbiased=*/false) + 1e-5);
      const torch::Tensor w = (torch::rand({hidden}, cuda) + 0.5).to(dtype);
      const torch::Tensor dy = torch::randn({rows, hidden}, cuda).to(dtype);
      for (bool with_dsum : {false, true}) {
        const torch::Tensor dsum =
            with_dsum ? torch::randn({rows, hidden}, cuda).to(dtype) : torch::Tensor();
        const auto plain = Backward(dy, x, mean, rstd, w, dsum, /*residual_bias=*/false);
        const auto with = Backward(dy, x, mean, rstd, w, dsum, /*residual_bias=*/true);
        const std::string what = std::string(c10::toString(dtype)) + " hidden " +
                                 std::to_string(hidden) + (with_dsum ? " with dsum" : "");
        ASSERT_EQ(with.size(), 4u);
        // The register kernel holds a row of up to 512 16-byte packs (2 a thread, 8 warps).
        const int64_t vec = fp32 ? 4 : 8;
        const bool streaming = hidden % vec != 0 || hidden / vec > 512;
        auto within = [&](const torch::Tensor& got, const torch::Tensor& want) {
          const torch::Tensor w32 = want.to(torch::kFloat);
          const double scale = w32.abs().max().item<double>();
          return Excess(got.to(torch::kFloat), w32, fp32 ? 1e-4 : 1e-2,
                        (fp32 ? 1e-5 : 1e-2) * scale) <= 0.0;
        };
        EXPECT_TRUE(torch::equal(with[0], plain[0]))
            << "d x " << what << ": max diff " << (with[0] - plain[0]).abs().max().item<double>();
        const char* names[] = {"d x", "d weight", "d bias"};
        for (int i = 1; i < 3; ++i) {
          if (streaming) {
            EXPECT_TRUE(within(with[i], plain[i])) << names[i] << " " << what;
          } else {
            EXPECT_TRUE(torch::equal(with[i], plain[i]))
                << names[i] << " " << what << ": max diff "
                << (with[i] - plain[i]).abs().max().item<double>();
          }
        }
        const torch::Tensor want = with[0].to(torch::kFloat).sum(0);
        EXPECT_GT(want.abs().max().item<double>(), 0.0) << what;
        EXPECT_TRUE(within(with[3], want)) << "d residual bias " << what;
      }
    }
  }
}

// The staged and pipelined backwards (rows of 32 W packs, each group of W warps taking every
// gridDim.x * rows-a-block-th row, the next rows' loads in flight: three rows in shared memory,
// or one in registers) against the fp64 formulas and each other (bit for bit), and the register
// kernel (LayerNormBackwardPath::kRegister) against the formulas, on the same inputs, over 20,000
// rows: ~20 rows a group, so every stage is reused six times (both phases of its barrier), the
// alternating reduction buffers and the last rows' empty prefetches all run. Widths of W = 1, 2, 3,
// 4, 6 and 8 warps in bf16 (256 to 2,048) and fp32 (128 to 1,024, and 768 = 6 warps), with and
// without dsum, the residual bias's gradient asked for (the sums of d x as written). Tolerances as
// the test above: fp32 1e-4 relative + 1e-5 (x the largest for the column sums); bf16 1e-2 +
// 1e-2 (x the largest), which the register kernel meets too.
TEST(FusedLayerNormGpu, StagedAndPipelinedBackwardsMatchTheFormulasOverManyRows) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(29);
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  const int64_t rows = 20000;
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kFloat}) {
    const bool fp32 = dtype == torch::kFloat;
    const int64_t pack = fp32 ? 4 : 8;
    for (int64_t warps : {1, 2, 3, 4, 6, 8}) {
      const int64_t hidden = 32 * warps * pack;
      const torch::Tensor x = (torch::randn({rows, hidden}, cuda) * 2 + 0.5).to(dtype);
      const torch::Tensor xd = x.to(torch::kDouble);
      const torch::Tensor mean = xd.mean(1).to(torch::kFloat);
      const torch::Tensor rstd =
          torch::rsqrt(xd.var(1, /*unbiased=*/false) + 1e-5).to(torch::kFloat);
      const torch::Tensor w = (torch::rand({hidden}, cuda) + 0.5).to(dtype);
      const torch::Tensor dy = torch::randn({rows, hidden}, cuda).to(dtype);
      for (bool with_dsum : {false, true}) {
        const torch::Tensor dsum =
            with_dsum ? torch::randn({rows, hidden}, cuda).to(dtype) : torch::Tensor();
        // The formulas in fp64 from the same (rounded) inputs and the same mean and rstd.
        const torch::Tensor xhat =
            (xd - mean.to(torch::kDouble).unsqueeze(1)) * rstd.to(torch::kDouble).unsqueeze(1);
        const torch::Tensor g = dy.to(torch::kDouble) * w.to(torch::kDouble);
        torch::Tensor dx = rstd.to(torch::kDouble).unsqueeze(1) *
                           (g - g.mean(1, true) - xhat * (g * xhat).mean(1, true));
        if (with_dsum) dx = dx + dsum.to(torch::kDouble);
        const std::vector<torch::Tensor> want = {dx, (dy.to(torch::kDouble) * xhat).sum(0),
                                                 dy.to(torch::kDouble).sum(0)};
        const char* names[] = {"d x", "d weight", "d bias", "d residual bias"};
        std::vector<torch::Tensor> staged;
        for (LayerNormBackwardPath path :
             {LayerNormBackwardPath::kStaged, LayerNormBackwardPath::kPipelined,
              LayerNormBackwardPath::kRegister}) {
          const auto got = Backward(dy, x, mean, rstd, w, dsum, /*residual_bias=*/true, path);
          ASSERT_EQ(got.size(), 4u);
          const std::string what =
              std::string(c10::toString(dtype)) + " hidden " + std::to_string(hidden) +
              (with_dsum ? " with dsum" : "") +
              (path == LayerNormBackwardPath::kStaged
                   ? " (staged)"
                   : (path == LayerNormBackwardPath::kPipelined ? " (pipelined)" : " (register)"));
          if (path == LayerNormBackwardPath::kStaged) staged = got;
          // The staged and pipelined kernels add in the same order: the same bits.
          if (path == LayerNormBackwardPath::kPipelined) {
            for (int i = 0; i < 4; ++i) {
              EXPECT_TRUE(torch::equal(got[i], staged[i])) << names[i] << " " << what;
            }
          }
          for (int i = 0; i < 4; ++i) {
            // The residual bias's gradient sums d x as written.
            const torch::Tensor ref = i < 3 ? want[i] : got[0].to(torch::kDouble).sum(0);
            const double largest = i == 0 ? 1.0 : ref.abs().max().item<double>();
            EXPECT_LE(Excess(got[i].to(torch::kDouble), ref, fp32 ? 1e-4 : 1e-2,
                             (fp32 ? 1e-5 : 1e-2) * largest),
                      0.0)
                << names[i] << " " << what;
          }
        }
      }
    }
  }
}
#endif

// The CPU tests' inputs, fp64: x and the residual [4, 5, 32], the weight and the bias [32].
struct CpuInputs {
  torch::Tensor x, r, w, b;
};

CpuInputs MakeCpuInputs(uint64_t seed) {
  torch::manual_seed(seed);
  CpuInputs in;
  in.x = torch::randn({4, 5, 32}, torch::kDouble);
  in.r = torch::randn({4, 5, 32}, torch::kDouble);
  in.w = torch::rand({32}, torch::kDouble);
  in.b = torch::randn({32}, torch::kDouble);
  return in;
}

TEST(FusedLayerNormCpu, FallsBackToTorch) {
  const auto [x, r, w, b] = MakeCpuInputs(2);
  EXPECT_FALSE(FusedLayerNormAvailable(x, w));
  const auto [sum, y] = FusedAddLayerNorm(x, r, w, b, 1e-5);
  EXPECT_TRUE(torch::equal(sum, x + r));
  EXPECT_TRUE(torch::equal(y, torch::layer_norm(x + r, {32}, w, b, 1e-5)));
  EXPECT_TRUE(torch::equal(FusedLayerNorm(x, w, b, 1e-5), torch::layer_norm(x, {32}, w, b, 1e-5)));
}

// The residual's bias on the fallback: added to every row of the sum, its gradient the sums of
// the sum's gradient over rows; a bias of another width is an error that names it.
TEST(FusedLayerNormCpu, ResidualBiasFallsBackToTorch) {
  const auto [x, r, w, b] = MakeCpuInputs(3);
  auto rb = torch::randn({32}, torch::kDouble).requires_grad_(true);
  const auto [sum, y] = FusedAddLayerNorm(x, r, w, b, 1e-5, rb);
  EXPECT_TRUE(torch::allclose(sum, x + r + rb, 1e-15, 1e-15));
  EXPECT_TRUE(torch::allclose(y, torch::layer_norm(x + r + rb, {32}, w, b, 1e-5), 1e-15, 1e-15));
  const torch::Tensor dsum = torch::randn_like(sum);
  sum.backward(dsum);
  EXPECT_TRUE(torch::allclose(rb.grad(), dsum.reshape({-1, 32}).sum(0), 1e-12, 1e-12));
  try {
    FusedAddLayerNorm(x, r, w, b, 1e-5, torch::zeros({31}, torch::kDouble));
    ADD_FAILURE() << "a residual bias of 31 for hidden 32 was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("residual_bias must be [32]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mt::kernels::layer_norm_gpu_test
