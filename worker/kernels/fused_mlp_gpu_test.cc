// FusedMlp (cuBLASLt epilogues) against the unfused chain addmm -> gelu(tanh) -> addmm on the
// GPU, forward and backward, with and without fc1's bias gradient in the epilogue, with fc1's GELU
// in its epilogue and in a kernel after it (MlpGelu), and kAuto's choice remembered. The reference
// is the chain in fp32 on the same (rounded) inputs. fp32: every output within 1e-4 relative +
// 1e-4 x its largest entry (sums in another order; no TF32). bf16 / fp16: each output's largest
// error against the reference at most 1.5x that of LibTorch's own chain in the dtype (what
// 16-bit training without the epilogues computes), printed. No fallback is allowed: a pass
// means cuBLASLt ran the epilogues.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "worker/kernels/fused_mlp.h"
#include "worker/kernels/mlp_gelu_choice.h"
#include "worker/kernels/tensor_error_for_test.h"

namespace mt::kernels::fused_mlp_gpu_test {
namespace {

// y, dx, dw1, db1, dw2, db2 in fp32; inputs x, w1, b1, w2 and b2, or without b2: fc2 without a
// bias (its gradient then left out too).
std::vector<torch::Tensor> RunMlp(bool fused, const std::vector<torch::Tensor>& inputs,
                                  const torch::Tensor& dy, MlpBackward backward,
                                  MlpGelu gelu = MlpGelu::kEpilogue) {
  std::vector<torch::Tensor> p;
  for (const torch::Tensor& t : inputs) p.push_back(t.detach().clone().requires_grad_(true));
  const torch::Tensor b2 = p.size() > 4 ? p[4] : torch::Tensor();
  torch::Tensor y;
  if (fused) {
    FusedMlpOptions o;
    o.backward = backward;
    o.gelu = gelu;
    o.allow_fallback = false;
    y = FusedMlp(p[0], p[1], p[2], p[3], b2, o);
  } else {
    const torch::Tensor h = torch::gelu(torch::addmm(p[2], p[0], p[1].t()), "tanh");
    y = b2.defined() ? torch::addmm(b2, h, p[3].t()) : torch::mm(h, p[3].t());
  }
  y.backward(dy.to(y.scalar_type()));
  std::vector<torch::Tensor> out = {y.detach()};
  for (const torch::Tensor& t : p) out.push_back(t.grad());
  for (torch::Tensor& t : out) t = t.to(torch::kFloat);
  return out;
}

using MlpParam = std::tuple<torch::ScalarType, MlpBackward>;

class FusedMlpGpuTest : public ::testing::TestWithParam<MlpParam> {};

std::string ParamName(const ::testing::TestParamInfo<MlpParam>& info) {
  const char* modes[] = {"DGeluBGrad", "DGelu", "Unfused", "DGeluWGradBias"};
  return std::string(c10::toString(std::get<0>(info.param))) + "_" +
         modes[static_cast<int>(std::get<1>(info.param))];
}

// Each of `got`'s outputs against the fp32 reference `want` at the tolerances above (`same`:
// LibTorch's chain in the dtype); `what` names the case.
void ExpectNearReference(torch::ScalarType dtype, const std::vector<torch::Tensor>& got,
                         const std::vector<torch::Tensor>& want,
                         const std::vector<torch::Tensor>& same, const std::string& what) {
  const char* names[] = {"y", "d x", "d w1", "d b1", "d w2", "d b2"};
  for (size_t i = 0; i < want.size(); ++i) {
    const double scale = want[i].abs().max().item<double>();
    if (dtype == torch::kFloat) {
      const double excess =
          ((got[i] - want[i]).abs() - (1e-4 * scale + 1e-4 * want[i].abs())).max().item<double>();
      EXPECT_LE(excess, 0.0) << names[i] << " at " << what;
      continue;
    }
    const double ours = MaxError(got[i], want[i]), theirs = MaxError(same[i], want[i]);
    std::printf("%s %s: error %.3g (LibTorch in dtype %.3g), largest %.3g\n", what.c_str(),
                names[i], ours, theirs, scale);
    EXPECT_LE(ours, 1.5 * theirs) << names[i] << " at " << what;
  }
}

TEST_P(FusedMlpGpuTest, MatchesTheUnfusedChain) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto [dtype, backward] = GetParam();
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  for (const MlpGelu gelu : {MlpGelu::kEpilogue, MlpGelu::kKernel}) {
    torch::manual_seed(31);
    // (rows, hidden, ffn): rows that fill no tile; GPT-2 124M's widths. Each with fc2's bias and
    // without it (model::GptConfig::fold_linear_bias).
    for (auto [n, k, f] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{296, 64, 256}, {2048, 768, 3072}}) {
      for (bool with_b2 : {true, false}) {
        std::vector<torch::Tensor> inputs = {torch::randn({n, k}, cuda).to(dtype),
                                             (torch::randn({f, k}, cuda) * 0.05).to(dtype),
                                             (torch::randn({f}, cuda) * 0.1).to(dtype),
                                             (torch::randn({k, f}, cuda) * 0.05).to(dtype)};
        if (with_b2) inputs.push_back((torch::randn({k}, cuda) * 0.1).to(dtype));
        const torch::Tensor dy = torch::randn({n, k}, cuda).to(dtype);
        ASSERT_TRUE(FusedMlpAvailable(inputs[0], inputs[1], inputs[2], inputs[3],
                                      with_b2 ? inputs[4] : torch::Tensor()));
        std::vector<torch::Tensor> in32;
        for (const torch::Tensor& t : inputs) in32.push_back(t.to(torch::kFloat));
        ExpectNearReference(dtype, RunMlp(true, inputs, dy, backward, gelu),
                            RunMlp(false, in32, dy.to(torch::kFloat), backward),
                            RunMlp(false, inputs, dy, backward),
                            std::to_string(n) + "x" + std::to_string(k) + "x" + std::to_string(f) +
                                (with_b2 ? "" : " without b2") +
                                (gelu == MlpGelu::kKernel ? " (GELU kernel)" : " (GELU epilogue)"));
      }
    }
  }
}

// kAuto times both paths on a shape's first call and remembers the faster: its output is, bit
// for bit, that of the path it reports choosing (the GEMMs' algorithms are fixed within a
// process), and a second call of the shape times nothing.
TEST(FusedMlpGeluGpuTest, AutoRunsThePathItChoseAndRemembersIt) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(33);
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  const int64_t n = 4096, k = 512, f = 2048;  // a shape no other test uses
  const std::vector<torch::Tensor> inputs = {
      torch::randn({n, k}, cuda).to(torch::kBFloat16),
      (torch::randn({f, k}, cuda) * 0.05).to(torch::kBFloat16),
      (torch::randn({f}, cuda) * 0.1).to(torch::kBFloat16),
      (torch::randn({k, f}, cuda) * 0.05).to(torch::kBFloat16)};
  const torch::Tensor dy = torch::randn({n, k}, cuda).to(torch::kBFloat16);
  const MlpGeluCounts before = MlpGeluSoFar();
  const auto got = RunMlp(true, inputs, dy, MlpBackward::kDGelu, MlpGelu::kAuto);
  const MlpGeluCounts after = MlpGeluSoFar();
  ASSERT_EQ(after.shapes, before.shapes + 1);
  const bool kernel = after.kernel == before.kernel + 1;
  std::printf("%ldx%ldx%ld: kAuto chose the GELU %s\n", static_cast<long>(n), static_cast<long>(k),
              static_cast<long>(f), kernel ? "kernel" : "epilogue");
  const auto want =
      RunMlp(true, inputs, dy, MlpBackward::kDGelu, kernel ? MlpGelu::kKernel : MlpGelu::kEpilogue);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
  RunMlp(true, inputs, dy, MlpBackward::kDGelu, MlpGelu::kAuto);
  EXPECT_EQ(MlpGeluSoFar().shapes, after.shapes);
  EXPECT_EQ(MlpGeluSoFar().kernel, after.kernel);
}

// Without gradients FusedMlp takes the epilogue without the pre-activation: the same output.
TEST_P(FusedMlpGpuTest, InferenceGivesTheTrainingOutput) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dtype = std::get<0>(GetParam());
  torch::manual_seed(32);
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  const int64_t n = 512, k = 256, f = 1024;
  auto x = torch::randn({n, k}, cuda).to(dtype);
  auto w1 = (torch::randn({f, k}, cuda) * 0.05).to(dtype).requires_grad_(true);
  auto b1 = (torch::randn({f}, cuda) * 0.1).to(dtype).requires_grad_(true);
  auto w2 = (torch::randn({k, f}, cuda) * 0.05).to(dtype).requires_grad_(true);
  auto b2 = (torch::randn({k}, cuda) * 0.1).to(dtype).requires_grad_(true);
  FusedMlpOptions o;
  o.allow_fallback = false;
  const torch::Tensor training = FusedMlp(x, w1, b1, w2, b2, o).detach().to(torch::kFloat);
  torch::Tensor inference;
  {
    torch::NoGradGuard no_grad;
    inference = FusedMlp(x, w1, b1, w2, b2, o).to(torch::kFloat);
  }
  const double tol = dtype == torch::kFloat ? 1e-5 : 2e-2;
  EXPECT_LE(MaxError(inference, training), tol * training.abs().max().item<double>());
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, FusedMlpGpuTest,
    ::testing::Combine(::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf),
                       ::testing::Values(MlpBackward::kDGeluBGrad, MlpBackward::kDGelu,
                                         MlpBackward::kUnfused, MlpBackward::kDGeluWGradBias)),
    ParamName);

// CPU (and any tensor the epilogues do not take): the chain itself, exactly.
TEST(FusedMlpCpu, FallsBackToTheChain) {
  torch::manual_seed(5);
  std::vector<torch::Tensor> inputs = {
      torch::randn({6, 16}, torch::kDouble), torch::randn({40, 16}, torch::kDouble),
      torch::randn({40}, torch::kDouble), torch::randn({16, 40}, torch::kDouble),
      torch::randn({16}, torch::kDouble)};
  EXPECT_FALSE(FusedMlpAvailable(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4]));
  const torch::Tensor dy = torch::randn({6, 16}, torch::kDouble);
  const auto got = RunMlp(true, inputs, dy, MlpBackward::kDGelu);
  const auto want = RunMlp(false, inputs, dy, MlpBackward::kDGelu);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
  inputs.pop_back();  // fc2 without a bias
  EXPECT_FALSE(FusedMlpAvailable(inputs[0], inputs[1], inputs[2], inputs[3], torch::Tensor()));
  const auto got_nb = RunMlp(true, inputs, dy, MlpBackward::kDGelu);
  const auto want_nb = RunMlp(false, inputs, dy, MlpBackward::kDGelu);
  ASSERT_EQ(got_nb.size(), 5u);
  for (size_t i = 0; i < want_nb.size(); ++i) {
    EXPECT_TRUE(torch::equal(got_nb[i], want_nb[i])) << i << " without b2";
  }
}

}  // namespace
}  // namespace mt::kernels::fused_mlp_gpu_test
