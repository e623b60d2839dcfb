// The optimizer's fused kernels (adamw.h) against an fp64 reference of the same formulas on the
// GPU (label `gpu`; skips without CUDA).
//
// Pieces: sizes 1, 3, 4,096 (one whole tile), 4,097 (a tile and one element), 10,000 and
// 123,457 (many tiles, a ragged end), laid out in the flat buffers with gaps between them (the
// gaps must not be written), one piece without a gradient (reads zeros) and one whose gradient
// starts one element into its allocation (not vector-aligned: the element path). Three steps,
// with a gradient divisor of 2.5 and weight decay on every other piece.
// Tolerances: the kernel computes in fp32 what the reference computes in fp64 from the same
// inputs: master weights and first moments within 1e-6 of each tensor's largest magnitude, the
// second moment within 2e-5 (beta2 = 0.999 in fp32 is 1.3e-5 off; see
// worker/engine/optimizer_gpu_test.cc). The model copy is the master rounded, bit for bit. The
// sum of squares within 1e-5 relative (fp32 sums of up to 123,457 squares), and bit-identical
// when run twice.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

#include "worker/kernels/adamw.h"

namespace mt::kernels::adamw_gpu_test {
namespace {

constexpr int64_t kSizes[] = {1, 3, 4096, 4097, 10000, 123457};
constexpr int64_t kGap = 64;

struct Layout {
  std::vector<int64_t> begin;  // each piece's offset (state and model alike)
  int64_t total = 0;
};

Layout MakeLayout() {
  Layout l;
  int64_t at = kGap;
  for (int64_t n : kSizes) {
    l.begin.push_back(at);
    at += (n + kGap - 1) / kGap * kGap + kGap;
  }
  l.total = at;
  return l;
}

// Piece i's gradient: none for i == 1, one element into a larger allocation for i == 4.
torch::Tensor Gradient(size_t i, torch::ScalarType dtype) {
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  const int64_t n = kSizes[i];
  if (i == 1) return torch::Tensor();
  if (i == 4) return (torch::randn({n + 1}, options) * 1e-2).to(dtype).narrow(0, 1, n);
  return (torch::randn({n}, options) * 1e-2).to(dtype);
}

double ScaledError(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got.to(torch::kDouble) - want).abs().max() / want.abs().max()).item<double>();
}

struct Reference {
  torch::Tensor w, m, v;  // fp64
};

// One AdamW step of piece [b, b + n) in fp64 (torch.optim.AdamW's formula).
void ReferenceStep(Reference& r, int64_t b, const torch::Tensor& grad, int64_t n, bool decay,
                   double divisor, double t, const AdamWHyper& h) {
  torch::Tensor w = r.w.narrow(0, b, n), m = r.m.narrow(0, b, n), v = r.v.narrow(0, b, n);
  const torch::Tensor g =
      grad.defined() ? grad.to(torch::kDouble) / divisor : torch::zeros({n}, r.w.options());
  if (decay) w.mul_(1.0 - h.lr * h.weight_decay);
  m.mul_(h.beta1).add_(g, 1.0 - h.beta1);
  v.mul_(h.beta2).addcmul_(g, g, 1.0 - h.beta2);
  const double step_size = h.lr / (1.0 - std::pow(h.beta1, t));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, t));
  w.sub_(step_size * m / (v.sqrt() / bc2_sqrt + h.eps));
}

struct Case {
  torch::ScalarType grad;
  torch::ScalarType model;  // kFloat: the master is the model
};

class FusedAdamWGpuTest : public ::testing::TestWithParam<Case> {};

TEST_P(FusedAdamWGpuTest, MatchesTheFp64ReferenceAndLeavesTheGapsAlone) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!FusedOptimizerKernelsBuilt()) GTEST_SKIP() << "not a CUDA build of the kernels";
  const Case c = GetParam();
  torch::manual_seed(11);
  const Layout layout = MakeLayout();
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  AdamWState s;
  s.master = torch::randn({layout.total}, f32);
  s.exp_avg = torch::zeros({layout.total}, f32);
  s.exp_avg_sq = torch::zeros({layout.total}, f32);
  s.master_is_model = c.model == torch::kFloat;
  if (!s.master_is_model) s.model = s.master.to(c.model);
  s.step = torch::zeros({}, f32);
  s.grad_divisor = torch::full({}, 2.5, f32);
  s.found_inf = torch::zeros({}, f32);
  Reference r{s.master.to(torch::kDouble), s.exp_avg.to(torch::kDouble),
              s.exp_avg_sq.to(torch::kDouble)};
  const torch::Tensor master0 = s.master.clone();
  AdamWHyper h;
  h.lr = 1e-2;
  h.weight_decay = 0.1;
  for (int step = 1; step <= 3; ++step) {
    s.step.fill_(static_cast<double>(step));
    std::vector<AdamWPiece> pieces;
    for (size_t i = 0; i < layout.begin.size(); ++i) {
      AdamWPiece p;
      p.grad = Gradient(i, c.grad);
      p.state_begin = p.model_begin = layout.begin[i];
      p.numel = kSizes[i];
      p.weight_decay = i % 2 == 0;
      ReferenceStep(r, p.state_begin, p.grad, p.numel, p.weight_decay, 2.5, step, h);
      pieces.push_back(p);
    }
    ASSERT_TRUE(FusedAdamWSupports(s, pieces));
    FusedAdamW(s, pieces, h);
  }
  EXPECT_LE(ScaledError(s.master, r.w), 1e-6);
  EXPECT_LE(ScaledError(s.exp_avg, r.m), 1e-6);
  EXPECT_LE(ScaledError(s.exp_avg_sq, r.v), 2e-5);
  EXPECT_GT((s.master - master0).abs().max().item<double>(), 1e-3);  // it moved
  if (!s.master_is_model) {
    EXPECT_TRUE(torch::equal(s.model, s.master.to(c.model)));
  }
  // The gaps between pieces: the reference leaves them alone, so the comparisons above hold
  // there only if the kernel did too; check them bit for bit as well.
  torch::Tensor in_piece = torch::zeros({layout.total}, f32.dtype(torch::kBool));
  for (size_t i = 0; i < layout.begin.size(); ++i)
    in_piece.narrow(0, layout.begin[i], kSizes[i]).fill_(true);
  const torch::Tensor gap = in_piece.logical_not();
  EXPECT_TRUE(torch::equal(s.master.masked_select(gap), master0.masked_select(gap)));
  EXPECT_EQ(s.exp_avg.masked_select(gap).abs().max().item<float>(), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedAdamWGpuTest,
                         ::testing::Values(Case{torch::kBFloat16, torch::kBFloat16},
                                           Case{torch::kHalf, torch::kHalf},
                                           Case{torch::kFloat, torch::kBFloat16},
                                           Case{torch::kFloat, torch::kFloat}));

// The distributed optimizer's layout: this rank's state holds its slice only (state offsets
// from 0), which lies elsewhere in the model buffer (model offsets from 5,000). A bf16 model
// gets the slice's rounded master; an fp32 model is its own master, indexed by the model
// offsets. The rest of the model buffer stays as it was.
TEST(FusedAdamWGpuOnlyTest, AShardOfTheStateUpdatesItsRangeOfTheModel) {
  if (!torch::cuda::is_available() || !FusedOptimizerKernelsBuilt()) GTEST_SKIP() << "no CUDA";
  torch::manual_seed(13);
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  const int64_t model_total = 20000, slice = 9000, model_at = 5000;
  const int64_t lengths[] = {4000, 5000};  // two pieces (decayed, not), back to back
  for (bool fp32_model : {false, true}) {
    AdamWState s;
    const torch::Tensor model_fp32 = torch::randn({model_total}, f32);
    s.master_is_model = fp32_model;
    s.master = fp32_model ? model_fp32.clone() : model_fp32.narrow(0, model_at, slice).clone();
    if (!fp32_model) s.model = model_fp32.to(torch::kBFloat16);
    s.exp_avg = torch::zeros({slice}, f32);
    s.exp_avg_sq = torch::zeros({slice}, f32);
    s.step = torch::ones({}, f32);
    s.grad_divisor = torch::ones({}, f32);
    s.found_inf = torch::zeros({}, f32);
    const torch::Tensor model0 = fp32_model ? s.master.clone() : s.model.clone();
    Reference r{model_fp32.narrow(0, model_at, slice).to(torch::kDouble),
                torch::zeros({slice}, f32.dtype(torch::kDouble)),
                torch::zeros({slice}, f32.dtype(torch::kDouble))};
    AdamWHyper h;
    h.lr = 1e-2;
    h.weight_decay = 0.1;
    std::vector<AdamWPiece> pieces;
    int64_t local = 0;
    for (int i = 0; i < 2; ++i) {
      AdamWPiece p;
      p.grad = torch::randn({lengths[i]}, f32.dtype(torch::kBFloat16));
      p.state_begin = local;
      p.model_begin = model_at + local;
      p.numel = lengths[i];
      p.weight_decay = i == 0;
      ReferenceStep(r, local, p.grad, p.numel, p.weight_decay, 1.0, 1.0, h);
      pieces.push_back(p);
      local += lengths[i];
    }
    ASSERT_TRUE(FusedAdamWSupports(s, pieces));
    FusedAdamW(s, pieces, h);
    const torch::Tensor updated = fp32_model ? s.master.narrow(0, model_at, slice) : s.master;
    EXPECT_LE(ScaledError(updated, r.w), 1e-6) << "fp32 model " << fp32_model;
    EXPECT_LE(ScaledError(s.exp_avg, r.m), 1e-6) << "fp32 model " << fp32_model;
    const torch::Tensor model = fp32_model ? s.master : s.model;
    if (!fp32_model) {
      EXPECT_TRUE(torch::equal(model.narrow(0, model_at, slice), s.master.to(torch::kBFloat16)));
    }
    EXPECT_TRUE(torch::equal(model.narrow(0, 0, model_at), model0.narrow(0, 0, model_at)));
    const int64_t after = model_at + slice;
    EXPECT_TRUE(torch::equal(model.narrow(0, after, model_total - after),
                             model0.narrow(0, after, model_total - after)));
  }
}

TEST(FusedAdamWGpuOnlyTest, ASkippedStepChangesNothing) {
  if (!torch::cuda::is_available() || !FusedOptimizerKernelsBuilt()) GTEST_SKIP() << "no CUDA";
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  AdamWState s;
  s.master = torch::randn({5000}, f32);
  s.exp_avg = torch::randn({5000}, f32);
  s.exp_avg_sq = torch::rand({5000}, f32);
  s.model = s.master.to(torch::kBFloat16);
  s.step = torch::full({}, 4.0, f32);
  s.grad_divisor = torch::ones({}, f32);
  s.found_inf = torch::ones({}, f32);
  const std::vector<torch::Tensor> before = {s.master.clone(), s.exp_avg.clone(),
                                             s.exp_avg_sq.clone(), s.model.clone()};
  AdamWPiece p;
  p.grad = torch::randn({5000}, f32.dtype(torch::kBFloat16));
  p.numel = 5000;
  AdamWHyper h;
  h.lr = 1.0;
  FusedAdamW(s, {p}, h);
  EXPECT_TRUE(torch::equal(s.master, before[0]));
  EXPECT_TRUE(torch::equal(s.exp_avg, before[1]));
  EXPECT_TRUE(torch::equal(s.exp_avg_sq, before[2]));
  EXPECT_TRUE(torch::equal(s.model, before[3]));
}

TEST(FusedAdamWGpuOnlyTest, RefusesWhatItCannotRun) {
  if (!torch::cuda::is_available() || !FusedOptimizerKernelsBuilt()) GTEST_SKIP() << "no CUDA";
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  AdamWState s;
  s.master = torch::zeros({100}, f32);
  s.exp_avg = torch::zeros({100}, f32);
  s.exp_avg_sq = torch::zeros({100}, f32);
  s.model = torch::zeros({100}, f32.dtype(torch::kBFloat16));
  s.step = s.grad_divisor = s.found_inf = torch::zeros({}, f32);
  AdamWPiece p;
  p.numel = 60;
  p.state_begin = p.model_begin = 40;
  EXPECT_TRUE(FusedAdamWSupports(s, {p}));
  p.state_begin = 41;  // past the end
  EXPECT_FALSE(FusedAdamWSupports(s, {p}));
  p.state_begin = 40;
  p.grad = torch::zeros({59}, f32);  // not numel long
  EXPECT_FALSE(FusedAdamWSupports(s, {p}));
  p.grad = torch::zeros({60}, f32.dtype(torch::kDouble));
  EXPECT_FALSE(FusedAdamWSupports(s, {p}));
  p.grad = torch::Tensor();
  AdamWState d = s;
  d.master = torch::zeros({100}, f32.dtype(torch::kDouble));
  EXPECT_FALSE(FusedAdamWSupports(d, {p}));
  AdamWState both = s;
  both.master_is_model = true;  // with a model copy too
  EXPECT_FALSE(FusedAdamWSupports(both, {p}));
  AdamWState cpu = s;
  cpu.master = s.master.cpu();
  EXPECT_FALSE(FusedAdamWSupports(cpu, {p}));
}

TEST(GradSumOfSquaresGpuTest, MatchesFp64AndIsDeterministic) {
  if (!torch::cuda::is_available() || !FusedOptimizerKernelsBuilt()) GTEST_SKIP() << "no CUDA";
  torch::manual_seed(12);
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
    std::vector<GradPiece> pieces;
    double want = 0;
    for (size_t i = 0; i < std::size(kSizes); ++i) {
      GradPiece p{Gradient(i, dtype), i != 3};  // piece 3 only in the inf/NaN check
      if (p.grad.defined() && p.counted)
        want += p.grad.to(torch::kDouble).square().sum().item<double>();
      pieces.push_back(p);
    }
    ASSERT_TRUE(GradSumOfSquaresSupports(pieces));
    const torch::Tensor got = GradSumOfSquares(pieces);
    ASSERT_EQ(got.numel(), 1);
    EXPECT_NEAR(got.item<double>(), want, 1e-5 * want) << c10::toString(dtype);
    EXPECT_TRUE(torch::equal(GradSumOfSquares(pieces), got)) << "not deterministic";
    // An inf in the left-out piece reaches the sum; so does a NaN in a counted one.
    pieces[3].grad[17] = std::numeric_limits<float>::infinity();
    EXPECT_FALSE(std::isfinite(GradSumOfSquares(pieces).item<double>()));
    pieces[3].grad[17] = 0.0;
    pieces[5].grad[123456] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(GradSumOfSquares(pieces).item<double>()));
  }
}

TEST(GradSumOfSquaresGpuTest, RefusesMixedDtypes) {
  if (!torch::cuda::is_available() || !FusedOptimizerKernelsBuilt()) GTEST_SKIP() << "no CUDA";
  const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  EXPECT_TRUE(GradSumOfSquaresSupports({{torch::ones({3}, f32), true}}));
  EXPECT_FALSE(GradSumOfSquaresSupports(
      {{torch::ones({3}, f32), true}, {torch::ones({3}, f32.dtype(torch::kBFloat16)), true}}));
  EXPECT_FALSE(GradSumOfSquaresSupports({{torch::ones({3, 2}, f32), true}}));
  EXPECT_FALSE(GradSumOfSquaresSupports({{torch::ones({3}), true}}));  // CPU
  EXPECT_FALSE(GradSumOfSquaresSupports({{torch::Tensor(), true}}));   // nothing to sum
}

TEST(FusedAdamWCpu, NothingRunsOnTheCpu) {
  AdamWState s;
  s.master = torch::zeros({8});
  s.exp_avg = torch::zeros({8});
  s.exp_avg_sq = torch::zeros({8});
  s.master_is_model = true;
  s.step = s.grad_divisor = s.found_inf = torch::zeros({});
  AdamWPiece p;
  p.numel = 8;
  p.grad = torch::zeros({8});
  EXPECT_FALSE(FusedAdamWSupports(s, {p}));
  EXPECT_FALSE(GradSumOfSquaresSupports({{torch::zeros({8}), true}}));
}

}  // namespace
}  // namespace mt::kernels::adamw_gpu_test
