// GPU checks of the attention backends (label `gpu`): the fused kernel (flash /
// memory-efficient scaled_dot_product_attention) against the exact math path in bf16, and the
// whole model with either backend. Skips where there is no GPU or no fused attention.
//
// Tolerances: bf16 has an 8-bit mantissa (relative step 2^-8 = 0.0039); the two paths round
// at different points, so outputs and gradients are compared with atol = rtol = 2e-2, and
// each against an fp32 reference of the math path with the same tolerance.
#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <cmath>

#include "gtest/gtest.h"
#include "worker/model/gpt.h"
#include "worker/model/sdpa_backend.h"

namespace mt::model {
namespace {

#define MT_SKIP_WITHOUT_FUSED_GPU()                                              \
  do {                                                                           \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";          \
    if (!FusedAttentionAvailable())                                              \
      GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused attention"; \
  } while (false)

double MaxExcess(const torch::Tensor& got, const torch::Tensor& want, double atol, double rtol) {
  // max(|got - want| - (atol + rtol * |want|)); <= 0 means allclose.
  const torch::Tensor g = got.to(torch::kFloat);
  const torch::Tensor w = want.to(torch::kFloat);
  return ((g - w).abs() - (atol + rtol * w.abs())).max().item<double>();
}

TEST(AttentionGpuTest, FusedMatchesMathInBf16) {
  MT_SKIP_WITHOUT_FUSED_GPU();
  torch::manual_seed(0);
  const auto fp32 = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA);
  for (int64_t s : {128, 1024}) {
    const torch::Tensor q32 = torch::randn({2, 12, s, 64}, fp32);
    const torch::Tensor k32 = torch::randn({2, 12, s, 64}, fp32);
    const torch::Tensor v32 = torch::randn({2, 12, s, 64}, fp32);
    const torch::Tensor dout = torch::randn({2, 12, s, 64}, fp32);

    auto run = [&](torch::ScalarType dtype, AttentionBackend backend) {
      // detach(): fresh leaves each run (to() returns q32 itself when dtype is already fp32).
      torch::Tensor q = q32.to(dtype).detach().requires_grad_(true);
      torch::Tensor k = k32.to(dtype).detach().requires_grad_(true);
      torch::Tensor v = v32.to(dtype).detach().requires_grad_(true);
      torch::Tensor out = CausalAttention(q, k, v, 0.0, false, backend);
      out.backward(dout.to(dtype));
      return std::vector<torch::Tensor>{out.detach(), q.grad(), k.grad(), v.grad()};
    };
    const auto reference = run(torch::kFloat, AttentionBackend::kMath);
    const auto math = run(torch::kBFloat16, AttentionBackend::kMath);
    const char* what[] = {"output", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i) {
      EXPECT_LE(MaxExcess(math[i], reference[i], 2e-2, 2e-2), 0.0) << what[i] << " s=" << s;
    }
    // kFused (LibTorch's own pick), and each fused kernel pinned (kCudnn, kFlash).
    for (AttentionBackend backend :
         {AttentionBackend::kFused, AttentionBackend::kCudnn, AttentionBackend::kFlash}) {
      if (!SdpaBackendAvailable(backend)) continue;
      const auto fused = run(torch::kBFloat16, backend);
      const int b = static_cast<int>(backend);
      for (int i = 0; i < 4; ++i) {
        EXPECT_LE(MaxExcess(fused[i], math[i], 2e-2, 2e-2), 0.0)
            << what[i] << " s=" << s << " backend " << b;
        EXPECT_LE(MaxExcess(fused[i], reference[i], 2e-2, 2e-2), 0.0)
            << what[i] << " s=" << s << " backend " << b;
      }
    }
  }
}

TEST(AttentionGpuTest, FusedMatchesMathInFp32) {
  MT_SKIP_WITHOUT_FUSED_GPU();
  torch::manual_seed(1);
  const auto fp32 = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA);
  const torch::Tensor q = torch::randn({2, 4, 256, 64}, fp32);
  const torch::Tensor k = torch::randn({2, 4, 256, 64}, fp32);
  const torch::Tensor v = torch::randn({2, 4, 256, 64}, fp32);
  const torch::Tensor math = CausalAttention(q, k, v, 0.0, false, AttentionBackend::kMath);
  const torch::Tensor fused = CausalAttention(q, k, v, 0.0, false, AttentionBackend::kFused);
  // TF32 may be used by either path: 1e-3 relative.
  EXPECT_LE(MaxExcess(fused, math, 1e-3, 1e-3), 0.0);
}

TEST(AttentionGpuTest, ModelLossAgreesAcrossBackendsInBf16) {
  MT_SKIP_WITHOUT_FUSED_GPU();
  GptConfig c;
  c.num_layers = 4;
  c.hidden_size = 256;
  c.num_attention_heads = 4;
  c.seq_length = 512;
  c.vocab_size = 50257;
  c.hidden_dropout = 0.0;
  c.attention_dropout = 0.0;
  c.attention_backend = AttentionBackend::kMath;
  c.Resolve();
  torch::manual_seed(3);
  auto model = GptModel::Create(c);
  ASSERT_TRUE(model.ok()) << model.status();
  (*model)->to(torch::kCUDA, torch::kBFloat16);
  const torch::Tensor sample =
      torch::randint(c.vocab_size, {4, c.seq_length + 1},
                     torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
  const double l_math = (*model)->LossOnSample(sample).item<double>();
  (*model)->SetAttentionBackend(AttentionBackend::kFused);
  const double l_fused = (*model)->LossOnSample(sample).item<double>();
  EXPECT_NEAR(l_fused, l_math, 1e-2 * std::abs(l_math));
  EXPECT_NEAR(l_math, std::log(50304.0), 0.02 * std::log(50304.0));
}

// With dropout, the fused kernel draws its mask from the CUDA generator; replaying the
// generator state (what recomputation does) must reproduce the output exactly.
TEST(AttentionGpuTest, FusedDropoutIsReproducibleFromGeneratorState) {
  MT_SKIP_WITHOUT_FUSED_GPU();
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  torch::manual_seed(5);
  const torch::Tensor q = torch::randn({2, 4, 256, 64}, bf16);
  const torch::Tensor k = torch::randn({2, 4, 256, 64}, bf16);
  const torch::Tensor v = torch::randn({2, 4, 256, 64}, bf16);
  torch::manual_seed(9);
  const torch::Tensor a = CausalAttention(q, k, v, 0.1, true, AttentionBackend::kFused);
  torch::manual_seed(9);
  const torch::Tensor b = CausalAttention(q, k, v, 0.1, true, AttentionBackend::kFused);
  EXPECT_TRUE(torch::equal(a, b));
}

// Pinning a kernel leaves LibTorch's own switches as they were (other callers keep its pick).
TEST(AttentionGpuTest, PinnedBackendRestoresLibTorchSwitches) {
  MT_SKIP_WITHOUT_FUSED_GPU();
  if (!SdpaBackendAvailable(AttentionBackend::kCudnn)) GTEST_SKIP() << "no cuDNN attention";
#if TORCH_VERSION_MAJOR >= 2  // LibTorch 1.13 (CI's) has no attention switches to restore
  at::Context& ctx = at::globalContext();
  const bool flash = ctx.userEnabledFlashSDP(), mem = ctx.userEnabledMemEfficientSDP();
  const bool math = ctx.userEnabledMathSDP();
  const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  const torch::Tensor q = torch::randn({1, 2, 128, 64}, bf16);
  CausalAttention(q, q, q, 0.0, false, AttentionBackend::kCudnn);
  EXPECT_EQ(ctx.userEnabledFlashSDP(), flash);
  EXPECT_EQ(ctx.userEnabledMemEfficientSDP(), mem);
  EXPECT_EQ(ctx.userEnabledMathSDP(), math);
#endif
}

}  // namespace
}  // namespace mt::model
