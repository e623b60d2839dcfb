// The fused AdamW kernel against the element-wise path on a GPU (label `gpu`; skips without
// CUDA or on LibTorch < 2): same gradients in, the same master weights and moments out, for
// decayed and non-decayed parameters, over several steps. Both get the same gradients each step
// (fixed random tensors, so nothing feeds back), fp32 throughout: each tensor within 1e-6 of
// its own largest magnitude (the kernel orders its multiply-adds differently, a few ulp), and
// the second moment within 2e-5: the kernel takes beta2 in fp32, and 1 - 0.999f is
// 0.00099998713, 1.3e-5 off 0.001. A wrong coefficient (bias correction, beta, decay) is off by
// orders of magnitude more.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <memory>

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/engine/optimizer.h"

namespace mt::engine {
namespace {

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(64, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 16));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

TEST(OptimizerGpuTest, FusedAdamWMatchesTheElementwisePath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(5);
  auto a = std::make_shared<Net>();
  auto b = std::make_shared<Net>();
  a->to(torch::kCUDA);
  b->to(torch::kCUDA);
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < a->parameters().size(); ++i)
      b->parameters()[i].copy_(a->parameters()[i]);
  }
  OptimizerConfig fused;
  fused.weight_decay = 0.1;
  fused.clip_grad = 0.0;
  OptimizerConfig plain = fused;
  plain.fused_adamw = false;
  MT_ASSERT_OK_AND_ASSIGN(auto oa, MixedPrecisionOptimizer::Create(fused, *a));
  MT_ASSERT_OK_AND_ASSIGN(auto ob, MixedPrecisionOptimizer::Create(plain, *b));
  const torch::Tensor initial = oa->master_params().clone();
  for (int step = 0; step < 5; ++step) {
    oa->ZeroGrad();
    ob->ZeroGrad();
    torch::NoGradGuard g;
    for (size_t i = 0; i < a->parameters().size(); ++i) {
      const torch::Tensor grad = torch::randn_like(a->parameters()[i]) * 1e-2;
      a->parameters()[i].mutable_grad().copy_(grad);
      b->parameters()[i].mutable_grad().copy_(grad);
    }
    ASSERT_FALSE(oa->Step(1e-2, 1.0).skipped);
    ASSERT_FALSE(ob->Step(1e-2, 1.0).skipped);
  }
  auto scaled_error = [](const torch::Tensor& got, const torch::Tensor& want) {
    return ((got - want).abs().max() / want.abs().max()).item<double>();
  };
  EXPECT_LE(scaled_error(oa->master_params(), ob->master_params()), 1e-6);
  EXPECT_LE(scaled_error(oa->exp_avg(), ob->exp_avg()), 1e-6);
  EXPECT_LE(scaled_error(oa->exp_avg_sq(), ob->exp_avg_sq()), 2e-5);
  // The weights moved (the comparison is not between two untouched copies).
  EXPECT_GT((oa->master_params() - initial).abs().max().item<double>(), 1e-3);
  EXPECT_EQ(oa->step_count(), 5);
}

}  // namespace
}  // namespace mt::engine
