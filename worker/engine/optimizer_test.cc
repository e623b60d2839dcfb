// The mixed-precision optimizer against LibTorch's own AdamW and SGD (independent
// implementations), plus skipped steps, unscaling, the no-decay rule and bf16 master weights.
#include "worker/engine/optimizer.h"

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/gpt.h"
#include "worker/model/tiny_config_for_test.h"

namespace mt::engine {
namespace {

using model::GptConfig;
using model::GptModel;

std::shared_ptr<GptModel> TinyModel(uint64_t seed) {
  const GptConfig c = model::TinyConfig();
  torch::manual_seed(seed);
  auto m = GptModel::Create(c);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

torch::Tensor Sample(uint64_t seed, int64_t rows = 4) {
  torch::manual_seed(seed);
  return torch::randint(128, {rows, 17}, torch::kLong);
}

// Step and ZeroGrad, failing the test on an error status.
OptimizerStepResult StepOk(MixedPrecisionOptimizer& opt, double lr, double loss_scale) {
  absl::StatusOr<OptimizerStepResult> r = opt.Step(lr, loss_scale);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : OptimizerStepResult();
}

void Zero(MixedPrecisionOptimizer& opt) { MT_EXPECT_OK(opt.ZeroGrad()); }

double MaxParamDiff(GptModel& a, GptModel& b) {
  double worst = 0;
  auto pb = b.named_parameters();
  for (const auto& p : a.named_parameters()) {
    worst = std::max(worst, (p.value() - pb[p.key()]).abs().max().item<double>());
  }
  return worst;
}

std::vector<torch::optim::OptimizerParamGroup> Groups(
    GptModel& m,
    const std::function<std::unique_ptr<torch::optim::OptimizerOptions>(bool)>& options) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : m.named_parameters()) {
    (UsesWeightDecay(p.key(), p.value()) ? decay : no_decay).push_back(p.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(true));
  groups.emplace_back(no_decay, options(false));
  return groups;
}

// LibTorch's AdamW as the reference; fp32, 6 steps, tolerance 1e-6 on every weight.
TEST(OptimizerTest, AdamWMatchesLibTorchAdamW) {
  auto a = TinyModel(1);
  auto b = TinyModel(1);
  ASSERT_EQ(MaxParamDiff(*a, *b), 0.0);
  OptimizerConfig c;
  c.weight_decay = 0.1;
  c.adam_beta1 = 0.9;
  c.adam_beta2 = 0.95;
  c.adam_eps = 1e-8;
  c.clip_grad = 0.0;
  MT_ASSERT_OK_AND_ASSIGN(auto opt, MixedPrecisionOptimizer::Create(c, *a));
  const double lr = 3e-3;
  torch::optim::AdamW ref(Groups(*b,
                                 [&](bool decay) {
                                   return std::make_unique<torch::optim::AdamWOptions>(
                                       torch::optim::AdamWOptions(lr)
                                           .betas({0.9, 0.95})
                                           .eps(1e-8)
                                           .weight_decay(decay ? 0.1 : 0.0));
                                 }),
                          torch::optim::AdamWOptions(lr));
  for (int step = 0; step < 6; ++step) {
    const torch::Tensor x = Sample(100 + step);
    Zero(*opt);
    a->LossOnSample(x).backward();
    const OptimizerStepResult r = StepOk(*opt, lr, 1.0);
    ref.zero_grad();
    b->LossOnSample(x).backward();
    ref.step();
    EXPECT_FALSE(r.skipped());
    EXPECT_LE(MaxParamDiff(*a, *b), 1e-6) << "step " << step;
  }
  EXPECT_EQ(opt->step_count(), 6);
  EXPECT_GT(MaxParamDiff(*a, *TinyModel(1)), 1e-3);  // it did move
}

// OptimizerConfig::overlap_update where it cannot run (no CUDA here): overlaps_update() says so
// and the update is the one in the step, bit for bit, the forward's part waits included.
TEST(OptimizerTest, OverlapUpdateIsLeftOffWhereItCannotRun) {
  auto a = TinyModel(3);
  auto b = TinyModel(3);
  OptimizerConfig overlapped;
  overlapped.overlap_update = true;
  OptimizerParallelConfig parts;
  parts.forward_part = [a](const std::string& name) { return a->ForwardPartOf(name); };
  MT_ASSERT_OK_AND_ASSIGN(auto opt_a, MixedPrecisionOptimizer::Create(overlapped, *a, parts));
  MT_ASSERT_OK_AND_ASSIGN(auto opt_b, MixedPrecisionOptimizer::Create(OptimizerConfig{}, *b));
  EXPECT_FALSE(opt_a->overlaps_update());
  EXPECT_FALSE(opt_b->overlaps_update());
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor x = Sample(200 + step);
    for (const auto& [m, opt] : {std::pair{a, opt_a.get()}, std::pair{b, opt_b.get()}}) {
      Zero(*opt);
      MT_EXPECT_OK(opt->WaitForParametersOfPart(0));
      m->LossOnSample(x).backward();
      StepOk(*opt, 1e-2, 1.0);
    }
    EXPECT_EQ(MaxParamDiff(*a, *b), 0.0) << "step " << step;
  }
  EXPECT_GT(MaxParamDiff(*a, *TinyModel(3)), 1e-3);  // it did move
}

// Clipping by the global norm, against LibTorch's clip_grad_norm_ (the same formula as
// Megatron's: coeff = max_norm / (norm + 1e-6), applied when < 1). Plain SGD, so the update
// is the clipped gradient itself; tolerance 1e-6 relative.
TEST(OptimizerTest, ClipsByGlobalNormLikeClipGradNorm) {
  for (double clip : {0.05, 1e6}) {
    auto a = TinyModel(11);
    auto b = TinyModel(11);
    OptimizerConfig c;
    c.kind = OptimizerConfig::Kind::kSgd;
    c.sgd_momentum = 0.0;
    c.weight_decay = 0.0;
    c.clip_grad = clip;
    MT_ASSERT_OK_AND_ASSIGN(auto opt, MixedPrecisionOptimizer::Create(c, *a));
    const torch::Tensor x = Sample(12);
    Zero(*opt);
    a->LossOnSample(x).backward();
    const OptimizerStepResult r = StepOk(*opt, /*lr=*/1.0, 1.0);
    b->LossOnSample(x).backward();
    const double norm = torch::nn::utils::clip_grad_norm_(b->parameters(), clip);
    EXPECT_NEAR(r.grad_norm(), norm, 1e-6 * norm);  // reported before clipping
    // a moved by -clipped grad: a - b_initial == -grad_b (clipped).
    auto pb = b->named_parameters();
    double worst = 0;
    for (const auto& p : a->named_parameters()) {
      const torch::Tensor moved = p.value() - pb[p.key()];
      worst = std::max(worst, (moved + pb[p.key()].grad()).abs().max().item<double>());
    }
    EXPECT_LE(worst, 1e-6) << "clip " << clip;
  }
}

TEST(OptimizerTest, SgdMatchesLibTorchSgd) {
  auto a = TinyModel(2);
  auto b = TinyModel(2);
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::kSgd;
  c.weight_decay = 0.1;
  c.sgd_momentum = 0.9;
  c.clip_grad = 0.0;
  MT_ASSERT_OK_AND_ASSIGN(auto opt, MixedPrecisionOptimizer::Create(c, *a));
  const double lr = 0.05;
  torch::optim::SGD ref(
      Groups(*b,
             [&](bool decay) {
               return std::make_unique<torch::optim::SGDOptions>(
                   torch::optim::SGDOptions(lr).momentum(0.9).weight_decay(decay ? 0.1 : 0.0));
             }),
      torch::optim::SGDOptions(lr));
  for (int step = 0; step < 4; ++step) {
    const torch::Tensor x = Sample(200 + step);
    Zero(*opt);
    a->LossOnSample(x).backward();
    StepOk(*opt, lr, 1.0);
    ref.zero_grad();
    b->LossOnSample(x).backward();
    ref.step();
    EXPECT_LE(MaxParamDiff(*a, *b), 1e-6) << "step " << step;
  }
}

TEST(OptimizerTest, NoWeightDecayForBiasesAndOneDimensionalParameters) {
  auto m = TinyModel(3);
  std::map<std::string, bool> decay;
  for (const auto& p : m->named_parameters()) decay[p.key()] = UsesWeightDecay(p.key(), p.value());
  EXPECT_TRUE(decay.at("embedding.word_embeddings.weight"));
  EXPECT_TRUE(decay.at("embedding.position_embeddings.weight"));
  EXPECT_TRUE(decay.at("decoder.layers.0.self_attention.linear_qkv.weight"));
  EXPECT_FALSE(decay.at("decoder.layers.0.self_attention.linear_qkv.bias"));
  EXPECT_FALSE(decay.at("decoder.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(decay.at("decoder.final_layernorm.bias"));

  // Zero gradients: Adam moves nothing, only decoupled decay acts, on decayed tensors only.
  OptimizerConfig c;
  c.weight_decay = 0.5;
  MT_ASSERT_OK_AND_ASSIGN(auto opt, MixedPrecisionOptimizer::Create(c, *m));
  std::map<std::string, torch::Tensor> before;
  for (const auto& p : m->named_parameters()) before[p.key()] = p.value().clone();
  Zero(*opt);
  StepOk(*opt, /*lr=*/0.1, 1.0);
  for (const auto& p : m->named_parameters()) {
    const torch::Tensor want = decay[p.key()] ? before[p.key()] * (1 - 0.1 * 0.5) : before[p.key()];
    EXPECT_TRUE(torch::allclose(p.value(), want, 0, 1e-7)) << p.key();
  }
  // Decayed parameters lie first in the buffers; offsets are 64-element aligned.
  bool seen_no_decay = false;
  for (const auto& slot : opt->slots()) {
    EXPECT_EQ(slot.offset % 64, 0) << slot.name;
    if (!slot.weight_decay) seen_no_decay = true;
    EXPECT_FALSE(seen_no_decay && slot.weight_decay) << slot.name;
  }
  EXPECT_EQ(opt->num_parameters(), model::CountParameters(m->config()));
}

// An inf or NaN gradient skips the step and leaves weights, moments and the step count exactly
// as they were.
TEST(OptimizerTest, NonFiniteGradientSkipsStepAndChangesNothing) {
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    auto m = TinyModel(4);
    MT_ASSERT_OK_AND_ASSIGN(auto opt, MixedPrecisionOptimizer::Create(OptimizerConfig{}, *m));
    Zero(*opt);
    m->LossOnSample(Sample(1)).backward();
    ASSERT_FALSE(StepOk(*opt, 1e-3, 1.0).skipped());  // non-trivial state first
    const torch::Tensor master = opt->master_params().clone();
    const torch::Tensor m1 = opt->exp_avg().clone();
    const torch::Tensor m2 = opt->exp_avg_sq().clone();

    Zero(*opt);
    m->LossOnSample(Sample(2)).backward();
    {
      torch::NoGradGuard no_grad;
      m->decoder->layers[1]
          ->as<model::TransformerLayer>()
          ->mlp->linear_fc1->weight.mutable_grad()[3][5] = bad;
    }
    const OptimizerStepResult r = StepOk(*opt, 1e-3, 1.0);
    EXPECT_TRUE(r.skipped());
    EXPECT_FALSE(std::isfinite(r.grad_norm()));
    EXPECT_EQ(opt->step_count(), 1);
    EXPECT_TRUE(torch::equal(opt->master_params(), master));
    EXPECT_TRUE(torch::equal(opt->exp_avg(), m1));
    EXPECT_TRUE(torch::equal(opt->exp_avg_sq(), m2));

    Zero(*opt);
    m->LossOnSample(Sample(2)).backward();
    EXPECT_FALSE(StepOk(*opt, 1e-3, 1.0).skipped());
    EXPECT_EQ(opt->step_count(), 2);
  }
}

// Gradients of loss * S stepped with loss_scale S equal gradients of loss stepped with 1.
TEST(OptimizerTest, UnscalesByTheLossScale) {
  auto a = TinyModel(5);
  auto b = TinyModel(5);
  OptimizerConfig c;
  c.clip_grad = 1.0;
  MT_ASSERT_OK_AND_ASSIGN(auto oa, MixedPrecisionOptimizer::Create(c, *a));
  MT_ASSERT_OK_AND_ASSIGN(auto ob, MixedPrecisionOptimizer::Create(c, *b));
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor x = Sample(300 + step);
    Zero(*oa);
    (a->LossOnSample(x) * 4096.0).backward();
    const OptimizerStepResult ra = StepOk(*oa, 1e-3, 4096.0);
    Zero(*ob);
    b->LossOnSample(x).backward();
    const OptimizerStepResult rb = StepOk(*ob, 1e-3, 1.0);
    EXPECT_NEAR(ra.grad_norm(), rb.grad_norm(), 1e-6 * rb.grad_norm());
    EXPECT_LE(MaxParamDiff(*a, *b), 1e-6);
  }
}

// bf16 model with two micro-batches per step: fp32 master weights and state; the model holds
// the master rounded to bf16; micro-batch gradients are summed in fp32.
TEST(OptimizerTest, Bf16ModelKeepsFp32MasterWeights) {
  auto m = TinyModel(6);
  auto reference = TinyModel(6);  // fp32 copy, same initial weights
  m->to(torch::kBFloat16);
  OptimizerConfig c;
  c.num_micro_batches = 2;
  MT_ASSERT_OK_AND_ASSIGN(auto opt, MixedPrecisionOptimizer::Create(c, *m));
  ASSERT_TRUE(opt->has_fp32_master_grads());
  EXPECT_EQ(opt->master_grads().scalar_type(), torch::kFloat);
  EXPECT_EQ(opt->master_params().scalar_type(), torch::kFloat);
  EXPECT_EQ(opt->exp_avg().scalar_type(), torch::kFloat);
  for (const auto& slot : opt->slots()) {
    EXPECT_EQ(slot.param.scalar_type(), torch::kBFloat16);
  }
  // The master starts as the bf16 weights, exactly.
  EXPECT_TRUE(
      torch::equal(opt->MasterParam(opt->slots()[0]).to(torch::kBFloat16), opt->slots()[0].param));
  // Two micro-batches: master grads = fp32 sum of the two bf16 gradients.
  Zero(*opt);
  std::vector<torch::Tensor> micro_grads;
  for (int i = 0; i < 2; ++i) {
    m->LossOnSample(Sample(400 + i)).backward();
    micro_grads.push_back(opt->slots()[0].param.grad().to(torch::kFloat).clone());
    opt->FinishMicroBatch();
    EXPECT_EQ(opt->slots()[0].param.grad().abs().max().item<double>(), 0.0);
  }
  const auto& s0 = opt->slots()[0];
  EXPECT_TRUE(
      torch::equal(opt->master_grads().narrow(0, s0.offset, s0.numel).view(s0.param.sizes()),
                   micro_grads[0] + micro_grads[1]));
  const OptimizerStepResult r = StepOk(*opt, 1e-2, 1.0);
  EXPECT_FALSE(r.skipped());
  for (const auto& slot : opt->slots()) {
    EXPECT_TRUE(torch::equal(slot.param, opt->MasterParam(slot).to(torch::kBFloat16))) << slot.name;
  }
  // Training in bf16 lowers the loss as fp32 does.
  const torch::Tensor x = Sample(7);
  const double start = reference->LossOnSample(x).item<double>();
  for (int i = 0; i < 20; ++i) {
    Zero(*opt);
    m->LossOnSample(x).backward();
    StepOk(*opt, 1e-2, 1.0);
  }
  EXPECT_LT(m->LossOnSample(x).item<double>(), start - 0.5);
}

// bf16, one micro-batch per step, one rank: no fp32 master gradients and no gradient buffer
// (14 bytes per parameter between steps, plus one chunk-sized temporary during Step; autograd's
// bf16 .grad lives from backward to Step); the update converts the bf16 gradients chunk by
// chunk. Against the same steps with fp32 master gradients (two-micro-batch configuration, one
// micro-batch run): the same fp32 numbers go into the same arithmetic, so master weights and
// moments agree to 1e-6 relative (only the order of the norm's partial sums differs, which
// moves the clip coefficient by ulps). The first step's gradients come from backward; later
// steps get the same fixed bf16 gradients on both sides, so that a bf16 rounding flip of a
// weight cannot feed back into different gradients. chunk_elements = 1000 puts every
// parameter tensor across several chunks.
TEST(OptimizerTest, Bf16OneMicroBatchConvertsGradientsInChunks) {
  auto a = TinyModel(13);
  auto b = TinyModel(13);
  a->to(torch::kBFloat16);
  b->to(torch::kBFloat16);
  OptimizerConfig chunked;
  chunked.chunk_elements = 1000;
  chunked.clip_grad = 0.05;  // clipping acts
  OptimizerConfig fp32_grads = chunked;
  fp32_grads.num_micro_batches = 2;
  MT_ASSERT_OK_AND_ASSIGN(auto oa, MixedPrecisionOptimizer::Create(chunked, *a));
  MT_ASSERT_OK_AND_ASSIGN(auto ob, MixedPrecisionOptimizer::Create(fp32_grads, *b));
  EXPECT_FALSE(oa->has_fp32_master_grads());
  EXPECT_FALSE(oa->master_grads().defined());
  ASSERT_TRUE(ob->has_fp32_master_grads());
  const int64_t n = oa->model_params().numel();  // parameters + alignment padding
  const MixedPrecisionOptimizer::MemoryBytes ma = oa->memory_bytes();
  EXPECT_EQ(ma.params, 2 * n);
  EXPECT_EQ(ma.grads, 0);
  EXPECT_FALSE(oa->model_grads().defined());
  EXPECT_EQ(ma.master_params, 4 * n);
  EXPECT_EQ(ma.master_grads, 0);
  EXPECT_EQ(ma.optimizer_state, 8 * n);
  EXPECT_EQ(ma.temporary, 4 * 1000);
  EXPECT_EQ(ob->memory_bytes().master_grads, 4 * n);
  EXPECT_EQ(ob->memory_bytes().temporary, 0);
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor x = Sample(500 + step);
    Zero(*oa);
    Zero(*ob);
    if (step == 0) {
      a->LossOnSample(x).backward();
      b->LossOnSample(x).backward();
    } else {
      torch::NoGradGuard no_grad;
      torch::manual_seed(600 + step);
      auto pa = a->named_parameters();
      for (const auto& p : b->named_parameters()) {
        const torch::Tensor g =
            (torch::randn_like(p.value(), torch::kFloat) * 0.01).to(p.value().scalar_type());
        pa[p.key()].mutable_grad() = g.clone();  // as autograd makes it: a fresh tensor
        p.value().mutable_grad().copy_(g);       // b's gradient buffer
      }
    }
    EXPECT_EQ(a->embedding->word_embeddings->weight.grad().scalar_type(), torch::kBFloat16);
    const OptimizerStepResult ra = StepOk(*oa, 1e-2, 1.0);
    EXPECT_FALSE(a->embedding->word_embeddings->weight.grad().defined());  // dropped
    ob->FinishMicroBatch();
    const OptimizerStepResult rb = StepOk(*ob, 1e-2, 1.0);
    ASSERT_FALSE(ra.skipped());
    EXPECT_NEAR(ra.grad_norm(), rb.grad_norm(), 1e-6 * rb.grad_norm());
    EXPECT_GT(rb.grad_norm(), 0.05);  // so the clip coefficient is < 1
    auto rel = [](const torch::Tensor& x, const torch::Tensor& y) {
      return ((x - y).abs().max() / y.abs().max()).item<double>();
    };
    EXPECT_LE(rel(oa->master_params(), ob->master_params()), 1e-6) << "step " << step;
    EXPECT_LE(rel(oa->exp_avg(), ob->exp_avg()), 1e-6) << "step " << step;
    EXPECT_LE(rel(oa->exp_avg_sq(), ob->exp_avg_sq()), 1e-6) << "step " << step;
  }
  EXPECT_EQ(oa->step_count(), 3);
  EXPECT_GT(MaxParamDiff(*a, *TinyModel(13)), 1e-3);  // it moved
}

// The skip on a device-side inf, on the chunked bf16 path: nothing changes (weights, moments,
// t), and the next finite step goes through.
TEST(OptimizerTest, Bf16ChunkedPathSkipsNonFiniteGradients) {
  auto m = TinyModel(14);
  m->to(torch::kBFloat16);
  OptimizerConfig c;
  c.chunk_elements = 777;
  MT_ASSERT_OK_AND_ASSIGN(auto opt, MixedPrecisionOptimizer::Create(c, *m));
  ASSERT_FALSE(opt->has_fp32_master_grads());
  Zero(*opt);
  m->LossOnSample(Sample(1)).backward();
  ASSERT_FALSE(StepOk(*opt, 1e-3, 1.0).skipped());
  const torch::Tensor master = opt->master_params().clone();
  const torch::Tensor weights = opt->model_params().clone();
  const torch::Tensor m1 = opt->exp_avg().clone();
  const torch::Tensor m2 = opt->exp_avg_sq().clone();
  Zero(*opt);
  m->LossOnSample(Sample(2)).backward();
  {
    torch::NoGradGuard no_grad;
    m->embedding->word_embeddings->weight.mutable_grad()[7][3] =
        -std::numeric_limits<double>::infinity();
  }
  const OptimizerStepResult r = StepOk(*opt, 1e-3, 1.0);
  EXPECT_TRUE(r.skipped());
  EXPECT_EQ(r.found_inf_tensor().item<float>(), 1.0f);
  EXPECT_EQ(opt->step_count(), 1);
  EXPECT_TRUE(torch::equal(opt->master_params(), master));
  EXPECT_TRUE(torch::equal(opt->model_params(), weights));
  EXPECT_TRUE(torch::equal(opt->exp_avg(), m1));
  EXPECT_TRUE(torch::equal(opt->exp_avg_sq(), m2));
  Zero(*opt);
  m->LossOnSample(Sample(2)).backward();
  EXPECT_FALSE(StepOk(*opt, 1e-3, 1.0).skipped());
  EXPECT_EQ(opt->step_count(), 2);
  EXPECT_FALSE(torch::equal(opt->master_params(), master));
}

// A .grad replaced or reset behind the optimizer's back is folded back into its buffer.
TEST(OptimizerTest, RecoversReplacedGradients) {
  auto a = TinyModel(8);
  auto b = TinyModel(8);
  MT_ASSERT_OK_AND_ASSIGN(auto oa, MixedPrecisionOptimizer::Create(OptimizerConfig{}, *a));
  MT_ASSERT_OK_AND_ASSIGN(auto ob, MixedPrecisionOptimizer::Create(OptimizerConfig{}, *b));
  const torch::Tensor x = Sample(9);
  Zero(*oa);
  a->LossOnSample(x).backward();
  StepOk(*oa, 1e-3, 1.0);
  Zero(*ob);
  for (auto& p : b->parameters()) p.mutable_grad().reset();  // zero_grad(set_to_none)
  b->LossOnSample(x).backward();
  auto& w = b->embedding->word_embeddings->weight;
  w.mutable_grad() = w.grad().clone();  // replaced
  StepOk(*ob, 1e-3, 1.0);
  EXPECT_EQ(MaxParamDiff(*a, *b), 0.0);
}

TEST(OptimizerTest, RejectsBadConfig) {
  auto m = TinyModel(1);
  OptimizerConfig c;
  c.adam_beta2 = 1.0;
  EXPECT_THAT(MixedPrecisionOptimizer::Create(c, *m),
              ::mt::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                      ::testing::HasSubstr("adam_beta2")));
  torch::nn::Module empty;
  EXPECT_THAT(MixedPrecisionOptimizer::Create(OptimizerConfig{}, empty),
              ::mt::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                      ::testing::HasSubstr("no trainable")));
}

}  // namespace
}  // namespace mt::engine
