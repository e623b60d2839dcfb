// ColumnSum and LinearWithBias (column_sum.h) on the GPU (label `gpu`; skips without CUDA), and
// their CPU fallback.
//
// ColumnSum against the fp64 sum of the same (rounded) inputs, for rows that are not a
// multiple of a chunk (1, 300, 4,097), a GPT's shapes (8,192 x 6,144 is the 1.3B QKV's
// gradient) and columns of one, several and a ragged number of 32-vector groups. Bound:
// |got - want| <= u |want| + 1e-5 sum |x| (u: the output's rounding, 2^-8 bf16, 2^-11 fp16, 0
// fp32; 1e-5 sum |x| covers fp32 sums in another order). Run twice it gives the same bits. A
// row of 7 bf16 columns (no whole 16-byte vectors) takes LibTorch's sum.
// LinearWithBias against torch::addmm(b, x, w.t()) with LibTorch's autograd: on the CPU the
// output bit for bit (the same call); on the GPU the output, dx and dw are GEMMs of the same
// operands that cuBLASLt may run with another algorithm (TunedAddmm, TunedMm), so within
// 2^-7 |want| + 2^-8 max |want| in bf16 and 1e-6 relative in fp32; db within the bound above
// (a different reduction).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <utility>

#include "worker/kernels/column_sum.h"
#include "worker/kernels/tensor_error_for_test.h"

namespace mt::kernels::column_sum_gpu_test {
namespace {

// max over columns of |got - want| - bound (<= 0 passes).
double Excess(const torch::Tensor& got, const torch::Tensor& x) {
  const torch::Tensor xd = x.to(torch::kDouble);
  const torch::Tensor want = xd.sum(0);
  const torch::Tensor bound = RoundingUnit(x.scalar_type()) * want.abs() + 1e-5 * xd.abs().sum(0);
  return ((got.to(torch::kDouble) - want).abs() - bound).max().item<double>();
}

TEST(ColumnSumGpuTest, MatchesTheFp64SumAndIsDeterministic) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(21);
  const std::pair<int64_t, int64_t> shapes[] = {{1, 8},      {300, 768},   {4097, 2304},
                                                {129, 1032}, {32768, 768}, {8192, 6144}};
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
    for (const auto& [rows, cols] : shapes) {
      const std::string what = std::string(c10::toString(dtype)) + " " + std::to_string(rows) +
                               "x" + std::to_string(cols);
      const torch::Tensor x =
          torch::randn({rows, cols}, torch::TensorOptions().device(torch::kCUDA)).to(dtype);
      const torch::Tensor got = ColumnSum(x);
      ASSERT_EQ(got.scalar_type(), dtype) << what;
      ASSERT_EQ(got.sizes(), torch::IntArrayRef({cols})) << what;
      EXPECT_LE(Excess(got, x), 0.0) << what;
      EXPECT_LE(Excess(x.sum(0), x), 0.0) << what << ": LibTorch's own sum misses the bound";
      EXPECT_TRUE(torch::equal(ColumnSum(x), got)) << what << ": not deterministic";
    }
  }
}

TEST(ColumnSumGpuTest, RowsOfNoWholeVectorTakeLibTorchsSum) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Tensor x =
      torch::randn({50, 7}, torch::TensorOptions().device(torch::kCUDA)).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(ColumnSum(x), x.sum(0)));
  const torch::Tensor strided = torch::randn({64, 32}, x.options()).t();  // not contiguous
  EXPECT_TRUE(torch::equal(ColumnSum(strided), strided.sum(0)));
}

struct LinearResult {
  torch::Tensor y, dx, dw, db;
};

// b0 undefined: the linear without a bias (LinearWithoutBias against mm).
LinearResult RunLinear(bool ours, const torch::Tensor& x0, const torch::Tensor& w0,
                       const torch::Tensor& b0, const torch::Tensor& dy) {
  auto x = x0.detach().clone().requires_grad_(true);
  auto w = w0.detach().clone().requires_grad_(true);
  if (!b0.defined()) {
    const torch::Tensor y = ours ? LinearWithoutBias(x, w) : torch::mm(x, w.t());
    y.backward(dy);
    return {y.detach(), x.grad(), w.grad(), torch::Tensor()};
  }
  auto b = b0.detach().clone().requires_grad_(true);
  const torch::Tensor y = ours ? LinearWithBias(x, w, b) : torch::addmm(b, x, w.t());
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

// With the bias: LinearWithBias against addmm; without: LinearWithoutBias against mm.
void ExpectLinearMatchesAddmm(torch::Device device, torch::ScalarType dtype, bool with_bias) {
  torch::manual_seed(22);
  const auto options = torch::TensorOptions().device(device).dtype(torch::kFloat);
  const torch::Tensor x = torch::randn({300, 64}, options).to(dtype);
  const torch::Tensor w = torch::randn({96, 64}, options).to(dtype);
  const torch::Tensor b = with_bias ? torch::randn({96}, options).to(dtype) : torch::Tensor();
  const torch::Tensor dy = torch::randn({300, 96}, options).to(dtype);
  const LinearResult ours = RunLinear(true, x, w, b, dy);
  const LinearResult ref = RunLinear(false, x, w, b, dy);
  const std::string what = std::string(c10::toString(dtype)) + " on " + device.str() +
                           (with_bias ? "" : " without a bias");
  if (!device.is_cuda()) {
    EXPECT_TRUE(torch::equal(ours.y, ref.y)) << what;
  }
  const bool bf16 = dtype == torch::kBFloat16;
  for (const auto& [got, want] :
       {std::pair(ours.y, ref.y), std::pair(ours.dx, ref.dx), std::pair(ours.dw, ref.dw)}) {
    const torch::Tensor g = got.to(torch::kDouble), r = want.to(torch::kDouble);
    const double largest = r.abs().max().item<double>();
    const torch::Tensor bound = bf16 ? std::ldexp(1.0, -7) * r.abs() + std::ldexp(1.0, -8) * largest
                                     : 1e-6 * r.abs() + 1e-6 * largest;
    EXPECT_LE(((g - r).abs() - bound).max().item<double>(), 0.0) << what;
  }
  if (with_bias) {
    EXPECT_LE(Excess(ours.db, dy), 0.0) << what;
  } else {
    EXPECT_FALSE(ours.db.defined()) << what;
  }
}

TEST(ColumnSumGpuTest, LinearWithBiasMatchesAddmm) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    for (bool with_bias : {true, false}) ExpectLinearMatchesAddmm(torch::kCUDA, dtype, with_bias);
  }
}

TEST(ColumnSumCpu, FallsBackToLibTorch) {
  const torch::Tensor x = torch::randn({33, 16});
  EXPECT_TRUE(torch::equal(ColumnSum(x), x.sum(0)));
  ExpectLinearMatchesAddmm(torch::kCPU, torch::kFloat, /*with_bias=*/true);
  ExpectLinearMatchesAddmm(torch::kCPU, torch::kFloat, /*with_bias=*/false);
}

}  // namespace
}  // namespace mt::kernels::column_sum_gpu_test
