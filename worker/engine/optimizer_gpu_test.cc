// The fused kernels (worker/kernels/adamw.h: the norm's sum of squares, AdamW with the model
// copy) against the element-wise path on a GPU (label `gpu`; skips without CUDA): same gradients
// in, the same master weights and moments out, for decayed and non-decayed parameters, over several
// steps. Both get the same gradients each step (fixed random tensors, so nothing feeds back), fp32
// throughout: each tensor within 1e-6 of its own largest magnitude (the kernel orders its
// multiply-adds differently, a few ulp), and the second moment within 2e-5: the kernel takes beta2
// in fp32, and 1 - 0.999f is 0.00099998713, 1.3e-5 off 0.001. A wrong coefficient (bias correction,
// beta, decay) is off by orders of magnitude more.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <limits>
#include <memory>
// A spin kernel (at::cuda::sleep, libtorch_cuda; the one behind torch.cuda._sleep) in a CUDA
// build only: the CPU LibTorch ships the header without the library.
#if defined(MT_ENGINE_WITH_CUDA) && MT_ENGINE_WITH_CUDA && __has_include(<ATen/cuda/Sleep.h>)
#include <ATen/cuda/Sleep.h>
#define MT_HAVE_CUDA_SLEEP 1
#endif

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"
#include "worker/engine/optimizer.h"
#include "worker/model/gpt.h"
#include "worker/model/tiny_config_for_test.h"

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
    MT_ASSERT_OK(oa->ZeroGrad());
    MT_ASSERT_OK(ob->ZeroGrad());
    torch::NoGradGuard g;
    for (size_t i = 0; i < a->parameters().size(); ++i) {
      const torch::Tensor grad = torch::randn_like(a->parameters()[i]) * 1e-2;
      a->parameters()[i].mutable_grad().copy_(grad);
      b->parameters()[i].mutable_grad().copy_(grad);
    }
    MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult ra, oa->Step(1e-2, 1.0));
    MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult rb, ob->Step(1e-2, 1.0));
    ASSERT_FALSE(ra.skipped());
    ASSERT_FALSE(rb.skipped());
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

// The common bf16 case on the GPU: a bf16 model, one micro-batch, no fp32 master gradients, the
// fused kernels reading each parameter's bf16 .grad as it is (no conversion chunk, although
// chunk_elements 3000 would cut every weight matrix on the element-wise path), unscaling and
// clipping folded into the kernel's gradient divisor. Reference: an fp32
// model starting from the same (bf16-representable) weights, stepped on the element-wise path
// with the same gradients in fp32. Loss scale 1024 with gradients scaled by it, clip 0.5 below
// the norm. Tolerances as above (fused kernel vs element-wise, fp32): 1e-6 of each tensor's
// largest magnitude, 2e-5 for the second moment. Then a step with an inf in one gradient: the
// skip is decided on the device and changes nothing (weights, master, moments, t).
TEST(OptimizerGpuTest, Bf16KernelPathMatchesTheFp32ReferenceAndSkipsOnTheDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(6);
  auto a = std::make_shared<Net>();  // bf16
  auto b = std::make_shared<Net>();  // fp32 reference
  a->to(torch::kCUDA, torch::kBFloat16);
  b->to(torch::kCUDA);
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < a->parameters().size(); ++i) {
      b->parameters()[i].copy_(a->parameters()[i]);
    }
  }
  OptimizerConfig chunked;
  chunked.weight_decay = 0.1;
  chunked.clip_grad = 0.5;
  chunked.chunk_elements = 3000;
  OptimizerConfig reference = chunked;
  reference.fused_adamw = false;
  MT_ASSERT_OK_AND_ASSIGN(auto oa, MixedPrecisionOptimizer::Create(chunked, *a));
  MT_ASSERT_OK_AND_ASSIGN(auto ob, MixedPrecisionOptimizer::Create(reference, *b));
  ASSERT_FALSE(oa->has_fp32_master_grads());
  EXPECT_EQ(oa->memory_bytes().temporary, 0);
  EXPECT_EQ(oa->memory_bytes().grads, 0);
  const torch::Tensor initial = oa->master_params().clone();
  ASSERT_TRUE(torch::equal(initial, ob->master_params()));
  const double scale = 1024.0;
  for (int step = 0; step < 5; ++step) {
    MT_ASSERT_OK(oa->ZeroGrad());
    MT_ASSERT_OK(ob->ZeroGrad());
    torch::NoGradGuard g;
    for (size_t i = 0; i < a->parameters().size(); ++i) {
      const torch::Tensor grad =
          (torch::randn_like(b->parameters()[i]) * scale).to(torch::kBFloat16);
      // The bf16 model has no gradient buffer (per-parameter .grad, as autograd makes it).
      a->parameters()[i].mutable_grad() = grad.clone();
      b->parameters()[i].mutable_grad().copy_(grad);
    }
    MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult ra, oa->Step(1e-2, scale));
    MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult rb, ob->Step(1e-2, scale));
    ASSERT_FALSE(ra.skipped());
    EXPECT_TRUE(ra.grad_norm_tensor().is_cuda());
    EXPECT_NEAR(ra.grad_norm(), rb.grad_norm(), 1e-5 * rb.grad_norm());
    EXPECT_GT(rb.grad_norm(), 1.0);  // the clip acts
  }
  auto scaled_error = [](const torch::Tensor& got, const torch::Tensor& want) {
    return ((got - want).abs().max() / want.abs().max()).item<double>();
  };
  EXPECT_LE(scaled_error(oa->master_params(), ob->master_params()), 1e-6);
  EXPECT_LE(scaled_error(oa->exp_avg(), ob->exp_avg()), 1e-6);
  EXPECT_LE(scaled_error(oa->exp_avg_sq(), ob->exp_avg_sq()), 2e-5);
  EXPECT_TRUE(torch::equal(oa->model_params(), oa->master_params().to(torch::kBFloat16)));
  EXPECT_GT((oa->master_params() - initial).abs().max().item<double>(), 1e-3);
  EXPECT_EQ(oa->step_count(), 5);

  // A non-finite gradient: skipped on the device, nothing changes.
  const torch::Tensor master = oa->master_params().clone();
  const torch::Tensor weights = oa->model_params().clone();
  const torch::Tensor m1 = oa->exp_avg().clone();
  const torch::Tensor m2 = oa->exp_avg_sq().clone();
  MT_ASSERT_OK(oa->ZeroGrad());
  {
    torch::NoGradGuard g;
    for (auto& p : a->parameters()) p.mutable_grad() = torch::randn_like(p);
    a->parameters()[2].mutable_grad()[5][7] = std::numeric_limits<float>::quiet_NaN();
  }
  MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult r, oa->Step(1e-2, 1.0));
  EXPECT_TRUE(r.skipped());
  EXPECT_EQ(oa->step_count(), 5);
  EXPECT_TRUE(torch::equal(oa->master_params(), master));
  EXPECT_TRUE(torch::equal(oa->model_params(), weights));
  EXPECT_TRUE(torch::equal(oa->exp_avg(), m1));
  EXPECT_TRUE(torch::equal(oa->exp_avg_sq(), m2));
}

// Step does not wait for the device: with the GPU kept busy for about a second (a spin kernel
// queued first), Step returns long before the queue drains, and reading the result waits.
TEST(OptimizerGpuTest, StepDoesNotSynchronizeWithTheHost) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
#ifndef MT_HAVE_CUDA_SLEEP
  GTEST_SKIP() << "not a CUDA build (no at::cuda::sleep)";
#else
  torch::manual_seed(7);
  auto a = std::make_shared<Net>();
  a->to(torch::kCUDA, torch::kBFloat16);
  MT_ASSERT_OK_AND_ASSIGN(auto opt, MixedPrecisionOptimizer::Create(OptimizerConfig{}, *a));
  for (int warm = 0; warm < 2; ++warm) {  // allocator and kernels warm
    MT_ASSERT_OK(opt->ZeroGrad());
    {
      torch::NoGradGuard g;
      for (auto& p : a->parameters()) p.mutable_grad() = torch::randn_like(p);
    }
    MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult r, opt->Step(1e-3, 1.0));
    (void)r.skipped();
  }
  MT_ASSERT_OK(opt->ZeroGrad());
  {
    torch::NoGradGuard g;
    for (auto& p : a->parameters()) p.mutable_grad() = torch::randn_like(p);
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  at::cuda::sleep(int64_t{2'000'000'000});  // ~1 s at ~2 GHz
  MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult r, opt->Step(1e-3, 1.0));
  const double step_s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_FALSE(r.skipped());  // waits for the queue
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GT(total_s, 0.3) << "the spin kernel did not keep the GPU busy; the test says nothing";
  EXPECT_LT(step_s, 0.25 * total_s) << "Step waited for the device";
#endif
}

// OptimizerConfig::overlap_update: the update on its own stream, part by part, against the same
// fused update in the step. The forward waits for each part's update (the pre-hook the trainer
// installs) and must read the updated weights: its loss equal bit for bit; the weights after
// each step equal bit for bit (the same kernel per element; only the launches are split). The
// gradients are fixed random tensors (no backward: nothing nondeterministic feeds back).
TEST(OptimizerGpuTest, OverlappedUpdateMatchesTheUpdateInTheStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  model::ModelBuildOptions build;
  build.seed = 11;
  build.device = torch::Device("cuda:0");
  build.dtype = torch::kBFloat16;
  MT_ASSERT_OK_AND_ASSIGN(auto a, model::GptModel::Create(model::TinyConfig(), {}, build));
  MT_ASSERT_OK_AND_ASSIGN(auto b, model::GptModel::Create(model::TinyConfig(), {}, build));
  OptimizerConfig config;
  config.overlap_update = true;
  OptimizerParallelConfig parts;
  parts.forward_part = [a](const std::string& name) { return a->ForwardPartOf(name); };
  MT_ASSERT_OK_AND_ASSIGN(auto opt_a, MixedPrecisionOptimizer::Create(config, *a, parts));
  MT_ASSERT_OK_AND_ASSIGN(auto opt_b, MixedPrecisionOptimizer::Create(OptimizerConfig{}, *b));
  if (!opt_a->overlaps_update()) GTEST_SKIP() << "not a CUDA build with the fused kernels";
  EXPECT_FALSE(opt_b->overlaps_update());
  std::vector<int64_t> waits;
  a->SetForwardPreHook([&](int64_t part) {
    waits.push_back(part);
    MT_EXPECT_OK(opt_a->WaitForParametersOfPart(part));
  });
  auto params_b = b->named_parameters();
  for (int step = 0; step < 4; ++step) {
    torch::manual_seed(300 + step);
    const torch::Tensor x = torch::randint(128, {4, 17}, torch::kLong).to(torch::kCUDA);
    waits.clear();
    torch::Tensor loss_a, loss_b;
    {
      torch::NoGradGuard no_grad;
      loss_a = a->LossOnSample(x);
      loss_b = b->LossOnSample(x);
    }
    EXPECT_EQ(waits, (std::vector<int64_t>{0, 1, 2, 3})) << "step " << step;
    EXPECT_EQ(loss_a.item<float>(), loss_b.item<float>()) << "step " << step;
    MT_ASSERT_OK(opt_a->ZeroGrad());
    MT_ASSERT_OK(opt_b->ZeroGrad());
    for (const auto& p : a->named_parameters()) {
      const torch::Tensor g = torch::randn(p.value().sizes()).to(p.value().options());
      p.value().mutable_grad() = g;
      params_b[p.key()].mutable_grad() = g.clone();
    }
    MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult ra, opt_a->Step(1e-2, 1.0));
    MT_ASSERT_OK_AND_ASSIGN(const OptimizerStepResult rb, opt_b->Step(1e-2, 1.0));
    EXPECT_EQ(ra.grad_norm(), rb.grad_norm());
  }
  MT_ASSERT_OK(opt_a->WaitForParameters());
  for (const auto& p : a->named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), params_b[p.key()])) << p.key();
  }
  EXPECT_TRUE(torch::equal(opt_a->exp_avg_sq(), opt_b->exp_avg_sq()));
  EXPECT_EQ(opt_a->step_count(), 4);
  a->SetForwardPreHook(nullptr);
}

}  // namespace
}  // namespace mt::engine
