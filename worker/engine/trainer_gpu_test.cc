// The trainer on a GPU (label `gpu`; skips without CUDA): bf16 and fp16 mixed precision with
// fp32 master weights, the fused attention path, recomputation with the CUDA generator, and
// seed repeatability. Tolerances are bf16's (relative step 2^-8): losses within 2e-2.
#include <torch/cuda.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/trainer.h"
#include "worker/model/gpt.h"

namespace mt::engine {
namespace {

#define MT_SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

mt::v1::JobSpec SmallSpec(mt::v1::Precision precision) {
  testutil::TinySpecOptions o;
  o.num_layers = 4;
  o.hidden_size = 256;
  o.seq_length = 256;
  o.vocab_size = 50257;
  o.micro_batch_size = 4;
  o.global_batch_size = 8;
  o.train_iters = 30;
  o.seed = std::nullopt;
  o.precision = precision;
  o.constant_lr = true;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_logging()->set_log_interval(10);
  return spec;
}

std::unique_ptr<BatchSource> Source(int64_t seq, int64_t tokens) {
  auto s = TokenSequenceSource::Create(SyntheticTokens(tokens, 50257, 3), seq);
  EXPECT_TRUE(s.ok());
  return std::move(*s);
}

// The tests look at every step's loss: read it from the device after each step.
TrainerOptions CudaOptions(const std::string& attention = "auto") {
  TrainerOptions o;
  o.device = "cuda:0";
  o.sync_every_step = true;
  o.peak_flops_per_second = 989e12;
  o.attention_backend = attention;
  return o;
}

TEST(TrainerGpuTest, Bf16AndFp16TrainWithFp32Master) {
  MT_SKIP_WITHOUT_CUDA();
  for (auto precision : {mt::v1::PRECISION_BF16, mt::v1::PRECISION_FP16}) {
    const mt::v1::JobSpec spec = SmallSpec(precision);
    // One repeated global batch: the loss must fall fast.
    MT_ASSERT_OK_AND_ASSIGN(auto trainer,
                            Trainer::Create(spec, CudaOptions(), Source(256, 8 * 256), nullptr));
    std::vector<StepMetrics> steps;
    MT_ASSERT_OK(trainer->Train([&](const StepMetrics& m) {
      steps.push_back(m);
      return true;
    }));
    ASSERT_EQ(steps.size(), 30u);
    EXPECT_NEAR(steps.front().loss, std::log(50304.0), 0.02 * std::log(50304.0));
    EXPECT_LT(steps.back().loss, steps.front().loss - 1.5) << "precision " << precision;
    EXPECT_EQ(trainer->optimizer().master_params().scalar_type(), torch::kFloat);
    EXPECT_TRUE(trainer->optimizer().master_params().is_cuda());
    if (precision == mt::v1::PRECISION_FP16) {
      // Dynamic scaling from 2^32: overflowing steps are skipped and the scale comes down.
      EXPECT_LT(steps.back().loss_scale, 4294967296.0);
      EXPECT_LT(steps.back().skipped_total, 25);
    } else {
      EXPECT_EQ(steps.back().skipped_total, 0);
    }
  }
}

TEST(TrainerGpuTest, SameSeedSameLosses) {
  MT_SKIP_WITHOUT_CUDA();
  mt::v1::JobSpec spec = SmallSpec(mt::v1::PRECISION_BF16);
  spec.mutable_training()->set_train_iters(5);
  std::vector<double> a, b;
  for (auto* out : {&a, &b}) {
    MT_ASSERT_OK_AND_ASSIGN(auto t,
                            Trainer::Create(spec, CudaOptions(), Source(256, 1 << 16), nullptr));
    MT_ASSERT_OK(t->Train([&](const StepMetrics& m) {
      out->push_back(m.loss);
      return true;
    }));
  }
  // Flash-attention backward may accumulate in a nondeterministic order: 1e-3 relative.
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-3 * a[i]) << i;
}

// Full and selective recomputation with dropout on the GPU: losses within bf16 tolerance of
// the plain run (the CUDA generator state is replayed in backward).
TEST(TrainerGpuTest, RecomputeMatchesWithDropout) {
  MT_SKIP_WITHOUT_CUDA();
  mt::v1::JobSpec spec = SmallSpec(mt::v1::PRECISION_BF16);
  spec.mutable_training()->set_train_iters(4);
  std::vector<double> ref;
  for (auto g : {mt::v1::RECOMPUTE_GRANULARITY_NONE, mt::v1::RECOMPUTE_GRANULARITY_FULL,
                 mt::v1::RECOMPUTE_GRANULARITY_SELECTIVE}) {
    mt::v1::JobSpec r = spec;
    r.mutable_training()->set_recompute_granularity(g);
    MT_ASSERT_OK_AND_ASSIGN(auto t,
                            Trainer::Create(r, CudaOptions(), Source(256, 1 << 16), nullptr));
    std::vector<double> losses;
    MT_ASSERT_OK(t->Train([&](const StepMetrics& m) {
      losses.push_back(m.loss);
      return true;
    }));
    if (ref.empty()) {
      ref = losses;
      continue;
    }
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_NEAR(losses[i], ref[i], 2e-2 * ref[i]) << "granularity " << g << " step " << i;
    }
  }
}

TEST(TrainerGpuTest, MathAndFusedAttentionTrainAlike) {
  MT_SKIP_WITHOUT_CUDA();
  if (!model::FusedAttentionAvailable()) GTEST_SKIP() << "no fused attention in this LibTorch";
  mt::v1::JobSpec spec = SmallSpec(mt::v1::PRECISION_BF16);
  spec.mutable_model()->set_hidden_dropout(0.0);
  spec.mutable_model()->set_attention_dropout(0.0);
  spec.mutable_training()->set_train_iters(5);
  std::vector<std::vector<double>> curves;
  for (const char* backend : {"math", "fused"}) {
    MT_ASSERT_OK_AND_ASSIGN(
        auto t, Trainer::Create(spec, CudaOptions(backend), Source(256, 1 << 16), nullptr));
    curves.emplace_back();
    MT_ASSERT_OK(t->Train([&](const StepMetrics& m) {
      curves.back().push_back(m.loss);
      return true;
    }));
  }
  for (size_t i = 0; i < curves[0].size(); ++i) {
    EXPECT_NEAR(curves[1][i], curves[0][i], 2e-2 * curves[0][i]) << i;
  }
}

// Losses and trainers of `spec` trained eagerly and then with the captured step.
struct EagerAndGraph {
  std::vector<std::vector<StepMetrics>> steps;  // [0] eager, [1] captured
  std::vector<std::unique_ptr<Trainer>> trainers;
};

// The two trainers' weights within 1e-2 of each tensor's largest magnitude.
void ExpectSameWeights(Trainer& eager, Trainer& graph) {
  auto want = eager.model().named_parameters();
  for (const auto& p : graph.model().named_parameters()) {
    const torch::Tensor w = want[p.key()].to(torch::kFloat);
    const double worst = (p.value().to(torch::kFloat) - w).abs().max().item<double>();
    EXPECT_LE(worst, 1e-2 * (w.abs().max().item<double>() + 1e-3)) << p.key();
  }
}

// `tokens`: the size of the synthetic token stream (a few batches' worth repeat, so the loss
// falls; random tokens beyond that keep it near ln(vocab)).
EagerAndGraph TrainEagerAndGraph(const mt::v1::JobSpec& spec, int64_t tokens = 1 << 16,
                                 const std::function<void(TrainerOptions&)>& adjust = {}) {
  EagerAndGraph r;
  for (const bool graph : {false, true}) {
    TrainerOptions options = CudaOptions();
    options.cuda_graph = graph;
    if (adjust) adjust(options);
    auto t = Trainer::Create(spec, options, Source(256, tokens), nullptr);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return r;
    r.steps.emplace_back();
    const absl::Status trained = (*t)->Train([&](const StepMetrics& m) {
      r.steps.back().push_back(m);
      return true;
    });
    EXPECT_TRUE(trained.ok()) << trained;
    EXPECT_EQ((*t)->step_graph_captured(), graph);
    r.trainers.push_back(std::move(*t));
  }
  return r;
}

// TrainerOptions::cuda_graph: the forward and backward captured at the first step and replayed
// after give the eager step's losses and final weights, in bf16 (the gradients per parameter,
// in the graph's pool) and fp32 (the master weights are the parameters), within 1e-3 relative
// (the attention backward may sum in another order, as in SameSeedSameLosses). A setting the
// graph cannot take (dropout that full recomputation reruns) trains eagerly.
TEST(TrainerGpuTest, CudaGraphStepGivesTheEagerLosses) {
  MT_SKIP_WITHOUT_CUDA();
  for (const mt::v1::Precision precision : {mt::v1::PRECISION_BF16, mt::v1::PRECISION_FP32}) {
    SCOPED_TRACE(::testing::Message() << "precision " << precision);
    mt::v1::JobSpec spec = SmallSpec(precision);
    spec.mutable_model()->set_hidden_dropout(0.0);
    spec.mutable_model()->set_attention_dropout(0.0);
    spec.mutable_training()->set_global_batch_size(4);  // one micro-batch a step
    spec.mutable_training()->set_train_iters(6);
    const EagerAndGraph r = TrainEagerAndGraph(spec);
    ASSERT_EQ(r.steps.size(), 2u);
    ASSERT_EQ(r.steps[0].size(), 6u);
    ASSERT_EQ(r.steps[1].size(), 6u);
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_NEAR(r.steps[1][i].loss, r.steps[0][i].loss, 1e-3 * r.steps[0][i].loss)
          << "step " << i;
    }
    ExpectSameWeights(*r.trainers[0], *r.trainers[1]);
  }
  mt::v1::JobSpec dropout = SmallSpec(mt::v1::PRECISION_BF16);
  dropout.mutable_training()->set_global_batch_size(4);
  dropout.mutable_training()->set_train_iters(2);
  dropout.mutable_model()->set_hidden_dropout(0.1);
  dropout.mutable_training()->set_recompute_granularity(mt::v1::RECOMPUTE_GRANULARITY_FULL);
  TrainerOptions options = CudaOptions();
  options.cuda_graph = true;
  MT_ASSERT_OK_AND_ASSIGN(auto t, Trainer::Create(dropout, options, Source(256, 1 << 16), nullptr));
  MT_ASSERT_OK(t->Train([](const StepMetrics& m) { return std::isfinite(m.loss); }));
  EXPECT_FALSE(t->step_graph_captured());
}

// The captured run of a step with dropout against its eager run, `steps` steps: losses within
// the attention backward's order (1e-3 relative), gradient norms 1e-2, the same final weights.
void ExpectCapturedDropoutFollowsEager(const EagerAndGraph& r, size_t steps) {
  ASSERT_EQ(r.steps.size(), 2u);
  ASSERT_EQ(r.steps[0].size(), steps);
  ASSERT_EQ(r.steps[1].size(), steps);
  for (size_t i = 0; i < steps; ++i) {
    EXPECT_NEAR(r.steps[1][i].loss, r.steps[0][i].loss, 1e-3 * r.steps[0][i].loss) << "step " << i;
    EXPECT_NEAR(r.steps[1][i].grad_norm, r.steps[0][i].grad_norm, 1e-2 * r.steps[0][i].grad_norm)
        << "step " << i;
  }
  ExpectSameWeights(*r.trainers[0], *r.trainers[1]);
}

// Dropout in the captured step, with the fused attention's dropout and the hidden dropout: the
// trainer seeds each step and the replay draws that seed's masks (checked exactly on one graph
// in step_graph_gpu_test.cc), so the losses and the final weights follow the eager step's
// within the attention backward's order (1e-3 relative, as above).
TEST(TrainerGpuTest, DropoutInACapturedStepDrawsTheEagerMasks) {
  MT_SKIP_WITHOUT_CUDA();
  mt::v1::JobSpec spec = SmallSpec(mt::v1::PRECISION_BF16);
  spec.mutable_model()->set_hidden_dropout(0.3);
  spec.mutable_model()->set_attention_dropout(0.3);
  spec.mutable_training()->set_global_batch_size(4);
  spec.mutable_training()->set_train_iters(6);
  const EagerAndGraph r = TrainEagerAndGraph(spec);
  ExpectCapturedDropoutFollowsEager(r, 6);
}

// TrainerOptions::fused_dropout_add: the hidden dropout drawn inside the LayerNorm kernels (the
// biases folded with it). Captured, each replay hands the kernels the graph's device seed and
// offset, so the captured run follows the eager one as LibTorch's dropout does above; and its
// masks are the kernels' own: the first step's loss differs from the same run with LibTorch's
// dropout (the same seed), which it would equal were the switch not applied.
TEST(TrainerGpuTest, FusedDropoutAddInACapturedStepDrawsTheEagerMasks) {
  MT_SKIP_WITHOUT_CUDA();
  mt::v1::JobSpec spec = SmallSpec(mt::v1::PRECISION_BF16);
  spec.mutable_model()->set_hidden_dropout(0.3);
  spec.mutable_model()->set_attention_dropout(0.0);
  spec.mutable_training()->set_global_batch_size(4);
  spec.mutable_training()->set_train_iters(6);
  const auto fused = [](TrainerOptions& o) { o.fused_dropout_add = true; };
  const EagerAndGraph r = TrainEagerAndGraph(spec, 1 << 16, fused);
  ExpectCapturedDropoutFollowsEager(r, 6);
  const EagerAndGraph torch_dropout = TrainEagerAndGraph(spec);
  ASSERT_EQ(torch_dropout.steps.size(), 2u);
  ASSERT_FALSE(torch_dropout.steps[0].empty());
  EXPECT_NE(torch_dropout.steps[0][0].loss, r.steps[0][0].loss);
}

// fp16 with the dynamic loss scale in the captured step: the scale is read from the device at
// each replay and fp16's gradients are folded into the fp32 master gradients after it, so the
// same steps overflow and are skipped, the scale comes down the same way, and the losses and
// weights follow the eager step's (1e-3 relative). From 2^32 with hysteresis 1 the first steps
// overflow until the scale fits; with a window of 1000 it does not grow back. One repeated
// batch: the loss must fall once the steps are no longer skipped (a lost fold would leave the
// updates without gradients).
TEST(TrainerGpuTest, Fp16DynamicLossScaleInACapturedStepSkipsAsTheEagerStep) {
  MT_SKIP_WITHOUT_CUDA();
  mt::v1::JobSpec spec = SmallSpec(mt::v1::PRECISION_FP16);
  spec.mutable_model()->set_hidden_dropout(0.0);
  spec.mutable_model()->set_attention_dropout(0.0);
  spec.mutable_training()->set_global_batch_size(4);
  spec.mutable_training()->set_train_iters(40);
  spec.mutable_training()->set_initial_loss_scale(4294967296.0);
  spec.mutable_training()->set_hysteresis(1);
  spec.mutable_training()->set_loss_scale_window(1000);
  const EagerAndGraph r = TrainEagerAndGraph(spec, 4 * 256);
  ASSERT_EQ(r.steps.size(), 2u);
  ASSERT_EQ(r.steps[0].size(), 40u);
  ASSERT_EQ(r.steps[1].size(), 40u);
  for (size_t i = 0; i < 40; ++i) {
    const StepMetrics& e = r.steps[0][i];
    const StepMetrics& g = r.steps[1][i];
    EXPECT_EQ(g.skipped, e.skipped) << "step " << i;
    EXPECT_EQ(g.loss_scale, e.loss_scale) << "step " << i;
    EXPECT_NEAR(g.loss, e.loss, 1e-3 * e.loss) << "step " << i;
  }
  const int64_t skipped = r.steps[1].back().skipped_total;
  EXPECT_GE(skipped, 1);
  EXPECT_LE(skipped, 29);
  size_t first = 0;  // the first step that updates
  while (first < 40 && r.steps[1][first].skipped) ++first;
  ASSERT_LT(first, 30u);
  EXPECT_LT(r.steps[1].back().loss, r.steps[1][first].loss - 0.5) << "the updates count";
  ExpectSameWeights(*r.trainers[0], *r.trainers[1]);
}

// TrainerOptions::overlap_optimizer: AdamW's update on its own stream, each forward part waiting
// for its parameters' update, in the captured step (the waits are graph nodes), against the
// update in the step; an eager step keeps the update in the step (it is asked for and not
// applied: the same bits as without it). Math
// attention and no GEMM tuning (both deterministic): where two runs without the overlap agree bit
// for bit, the overlapped run must too, losses and final weights; a forward that read weights
// before their update would differ (lr 1e-2 moves every weight each step).
TEST(TrainerGpuTest, OverlappedOptimizerTrainsAsTheUpdateInTheStep) {
  MT_SKIP_WITHOUT_CUDA();
  mt::v1::JobSpec spec = SmallSpec(mt::v1::PRECISION_BF16);
  spec.mutable_model()->set_hidden_dropout(0.0);
  spec.mutable_model()->set_attention_dropout(0.0);
  spec.mutable_training()->set_global_batch_size(4);  // one micro-batch: per-parameter gradients
  spec.mutable_training()->set_train_iters(6);
  spec.mutable_training()->set_lr(1e-2);
  for (const bool graph : {true, false}) {
    std::vector<std::vector<double>> curves;
    std::vector<std::unique_ptr<Trainer>> trainers;
    for (const bool overlap : {false, false, true}) {
      TrainerOptions options = CudaOptions("math");
      options.cuda_graph = graph;
      options.gemm_tuning = false;
      options.overlap_optimizer = overlap;
      MT_ASSERT_OK_AND_ASSIGN(auto t,
                              Trainer::Create(spec, options, Source(256, 1 << 16), nullptr));
      ASSERT_EQ(t->optimizer().overlaps_update(), overlap && graph) << "graph " << graph;
      curves.emplace_back();
      MT_ASSERT_OK(t->Train([&](const StepMetrics& m) {
        curves.back().push_back(m.loss);
        return true;
      }));
      ASSERT_EQ(curves.back().size(), 6u);
      EXPECT_EQ(t->step_graph_captured(), graph);
      trainers.push_back(std::move(t));
    }
    auto weights = [&](size_t i) { return trainers[i]->model().named_parameters(); };
    bool reproducible = curves[0] == curves[1];
    for (const auto& p : weights(1)) {
      reproducible = reproducible && torch::equal(p.value(), weights(0)[p.key()]);
    }
    std::printf("graph %d: two runs without the overlap agree bit for bit: %s\n", graph,
                reproducible ? "yes" : "no (comparing within 1e-3)");
    for (size_t i = 0; i < curves[0].size(); ++i) {
      if (reproducible) {
        EXPECT_EQ(curves[2][i], curves[0][i]) << "graph " << graph << " step " << i;
      } else {
        EXPECT_NEAR(curves[2][i], curves[0][i], 1e-3 * curves[0][i])
            << "graph " << graph << " step " << i;
      }
    }
    for (const auto& p : weights(2)) {
      const torch::Tensor want = weights(0)[p.key()];
      if (reproducible) {
        EXPECT_TRUE(torch::equal(p.value(), want)) << "graph " << graph << " " << p.key();
      } else {
        const double worst = (p.value() - want).to(torch::kFloat).abs().max().item<double>();
        EXPECT_LE(worst, 1e-2 * (want.to(torch::kFloat).abs().max().item<double>() + 1e-3))
            << "graph " << graph << " " << p.key();
      }
    }
  }
}

}  // namespace
}  // namespace mt::engine
