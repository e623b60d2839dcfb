// Int8Linear on the GPU against a double-precision reference on the same quantized weight: the
// GEMV kernel (int8_linear_kernel.cu) at every width it takes (1, 2, 3, 4 rows) and the
// dequantize kernel + GEMM past it (5 to 16 rows), with and without bias and GELU, at the decode
// shapes of GPT-2 124M and 1.3B (768 / 2048 in, 3 h and 4 h out) and at widths that leave warps
// idle (out 20, 8200); and the two paths against each other.
// Tolerances: fp32 1e-4 relative + 1e-4 absolute (sums in another order); bf16 / fp16 the
// dtype's rounding of outputs that are O(1): 1e-2 relative + 2e-2 absolute (bf16 keeps 8 bits).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <tuple>
#include <vector>

#include "worker/kernels/int8_linear.h"
#include "worker/kernels/linear_tolerance_for_test.h"

namespace mt::kernels::int8_linear_gpu_test {
namespace {

struct Shape {
  int64_t rows, in, out;
};

class Int8LinearGpuTest : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(Int8LinearGpuTest, KernelMatchesADoublePrecisionReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::ScalarType dtype = GetParam();
  const auto on = torch::TensorOptions().device(torch::kCUDA);
  const std::vector<Shape> shapes = {{1, 768, 2304},  {2, 768, 3072},  {3, 2048, 6144},
                                     {4, 8192, 2048}, {1, 2048, 8200}, {4, 768, 20},
                                     {5, 2048, 8200}, {8, 768, 20},    {16, 2048, 2048}};
  torch::manual_seed(11);
  for (const Shape& s : shapes) {
    // Weights of GPT-2's init scale; inputs O(1) as after a LayerNorm.
    const Int8Weight w = QuantizeInt8(torch::randn({s.out, s.in}, on) * 0.02);
    const torch::Tensor x = torch::randn({s.rows, s.in}, on).to(dtype);
    const torch::Tensor bias = (torch::randn({s.out}, on) * 0.1).to(dtype);
    ASSERT_EQ(Int8GemvAvailable(x, w), s.rows <= 4) << s.rows << "x" << s.in;
    const torch::Tensor wd = w.q.to(torch::kDouble) * w.scale.to(torch::kDouble).unsqueeze(1);
    const torch::Tensor linear = torch::matmul(x.to(torch::kDouble), wd.t());
    for (const bool with_bias : {false, true}) {
      for (const bool gelu : {false, true}) {
        torch::Tensor want = with_bias ? linear + bias.to(torch::kDouble) : linear;
        if (gelu) want = torch::gelu(want, "tanh");
        const torch::Tensor got = Int8Linear(x, w, with_bias ? bias : torch::Tensor(), gelu);
        ASSERT_EQ(got.scalar_type(), dtype);
        ASSERT_EQ(got.sizes(), (std::vector<int64_t>{s.rows, s.out}));
        EXPECT_LE(LinearExcess(got, want, dtype), 0.0)
            << "rows " << s.rows << " in " << s.in << " out " << s.out << " bias " << with_bias
            << " gelu " << gelu;
      }
    }
  }
}

TEST_P(Int8LinearGpuTest, KernelAgreesWithTheDequantizedPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::ScalarType dtype = GetParam();
  const auto on = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(12);
  const Int8Weight w = QuantizeInt8(torch::randn({3072, 768}, on) * 0.02);
  const torch::Tensor bias = (torch::randn({3072}, on) * 0.1).to(dtype);
  // [2, 1, 768]: a decode step's shape (batch 2, one token), any leading dimensions.
  const torch::Tensor x = torch::randn({2, 1, 768}, on).to(dtype);
  const torch::Tensor kernel = Int8Linear(x, w, bias, /*gelu=*/true);
  const torch::Tensor dequantized =
      torch::gelu(torch::nn::functional::linear(x, DequantizeInt8(w, dtype), bias), "tanh");
  ASSERT_EQ(kernel.sizes(), dequantized.sizes());
  EXPECT_LE(LinearExcess(kernel, dequantized, dtype), 0.0);
  // 5 rows is past the GEMV: the dequantize kernel's weight equals DequantizeInt8's (rounded
  // once from fp32 both), so the GEMM's result is LibTorch's on DequantizeInt8 exactly.
  const torch::Tensor many = torch::randn({5, 768}, on).to(dtype);
  EXPECT_FALSE(Int8GemvAvailable(many, w));
  const torch::Tensor got = Int8Linear(many, w, bias);
  const torch::Tensor want = torch::nn::functional::linear(many, DequantizeInt8(w, dtype), bias);
  EXPECT_EQ((got.to(torch::kFloat) - want.to(torch::kFloat)).abs().max().item<float>(), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Int8LinearGpuTest,
                         ::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf));

}  // namespace
}  // namespace mt::kernels::int8_linear_gpu_test
