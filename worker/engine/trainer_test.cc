// The training loop on the CPU with a tiny GPT (2 layers, hidden 32, 4 heads, seq 16,
// vocabulary 128 = padded vocabulary).
#include "worker/engine/trainer.h"

#include <torch/cuda.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/status_matchers.h"
#include "common/spec/defaults.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/optimizer.h"
#include "worker/model/gpt.h"

namespace mt::engine::trainer_test {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kSeq = 16;
constexpr int64_t kVocab = 128;

mt::v1::JobSpec TinySpec() {
  testutil::TinySpecOptions o;
  o.seq_length = kSeq;
  o.vocab_size = kVocab;
  o.micro_batch_size = 4;
  o.global_batch_size = 4;
  o.train_iters = 10;
  o.lr = 1e-3;
  o.seed = 1234;
  o.zero_dropout = true;
  o.constant_lr = true;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_logging()->set_log_interval(5);
  return spec;
}

// Every step's loss and grad norm read from the device: the tests below look at each step.
TrainerOptions QuietOptions() {
  TrainerOptions o;
  o.log_progress = false;
  o.attention_backend = "math";
  o.sync_every_step = true;
  return o;
}

// A random token sequence of `tokens` tokens (the same for every call with the same seed).
std::unique_ptr<BatchSource> Source(int64_t tokens, uint64_t seed = 7) {
  auto s = TokenSequenceSource::Create(SyntheticTokens(tokens, kVocab, seed), kSeq);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

std::unique_ptr<Trainer> MakeTrainer(const mt::v1::JobSpec& spec,
                                     std::unique_ptr<BatchSource> train,
                                     std::unique_ptr<BatchSource> valid = nullptr,
                                     TrainerOptions options = QuietOptions()) {
  auto t = Trainer::Create(spec, options, std::move(train), std::move(valid));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<StepMetrics> RunSteps(Trainer& trainer, int n) {
  std::vector<StepMetrics> out;
  for (int i = 0; i < n; ++i) {
    auto m = trainer.Step();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) break;
    out.push_back(*m);
  }
  return out;
}

double MaxParamDiff(model::GptModel& a, model::GptModel& b) {
  double worst = 0;
  auto pb = b.named_parameters();
  for (const auto& p : a.named_parameters()) {
    worst = std::max(worst, (p.value() - pb[p.key()]).abs().max().item<double>());
  }
  return worst;
}

// One fixed batch (the source holds exactly one global batch): the model memorises it.
TEST(TrainerTest, OverfitsOneBatch) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_lr(1e-2);
  spec.mutable_training()->set_weight_decay(0.0);
  spec.mutable_training()->set_train_iters(300);
  auto trainer = MakeTrainer(spec, Source(4 * kSeq));
  double loss = 1e9;
  int steps = 0;
  while (steps < 300 && loss >= 0.05) {
    MT_ASSERT_OK_AND_ASSIGN(StepMetrics m, trainer->Step());
    loss = m.loss;
    ++steps;
  }
  EXPECT_LT(loss, 0.05) << "after " << steps << " steps";
  EXPECT_LE(steps, 300);
  RecordProperty("steps_to_loss_below_0_05", steps);
}

// Same seed, same loss curve, bit for bit, with dropout on; another seed differs.
TEST(TrainerTest, SameSeedSameLossCurveBitForBit) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_model()->set_hidden_dropout(0.1);
  spec.mutable_model()->set_attention_dropout(0.1);
  auto a = MakeTrainer(spec, Source(4096));
  auto b = MakeTrainer(spec, Source(4096));
  const auto ca = RunSteps(*a, 10);
  const auto cb = RunSteps(*b, 10);
  ASSERT_EQ(ca.size(), 10u);
  ASSERT_EQ(cb.size(), 10u);
  for (size_t i = 0; i < ca.size(); ++i) {
    EXPECT_EQ(ca[i].loss, cb[i].loss) << "step " << i + 1;
    EXPECT_EQ(ca[i].grad_norm, cb[i].grad_norm) << "step " << i + 1;
  }
  EXPECT_EQ(MaxParamDiff(a->model(), b->model()), 0.0);

  spec.mutable_training()->set_seed(4321);
  auto c = MakeTrainer(spec, Source(4096));
  const auto cc = RunSteps(*c, 2);
  EXPECT_NE(cc[0].loss, ca[0].loss);
}

// Recomputation inside the trainer: the same loss curve (1e-6) with dropout on.
TEST(TrainerTest, RecomputeKeepsTheLossCurve) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_model()->set_hidden_dropout(0.1);
  spec.mutable_model()->set_attention_dropout(0.1);
  auto plain = MakeTrainer(spec, Source(4096));
  const auto ref = RunSteps(*plain, 3);
  for (auto g : {mt::v1::RECOMPUTE_GRANULARITY_FULL, mt::v1::RECOMPUTE_GRANULARITY_SELECTIVE}) {
    mt::v1::JobSpec r = spec;
    r.mutable_training()->set_recompute_granularity(g);
    auto trainer = MakeTrainer(r, Source(4096));
    const auto got = RunSteps(*trainer, 3);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_NEAR(got[i].loss, ref[i].loss, 1e-6) << "granularity " << g << " step " << i + 1;
    }
    EXPECT_LE(MaxParamDiff(trainer->model(), plain->model()), 1e-6);
  }
}

// micro-batch 2 x 4 accumulation steps equals micro-batch 8 x 1 (dropout off: the masks of
// one 8-sample draw and four 2-sample draws differ). Loss and updated weights within 1e-6.
// adam_eps = 1e-6 keeps the Adam update Lipschitz in the gradient (|delta update| <= lr *
// |delta g| / eps) so fp32 summation-order noise cannot be amplified by 1/eps at near-zero
// gradients.
TEST(TrainerTest, GradientAccumulationEqualsOneLargeBatch) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_global_batch_size(8);
  spec.mutable_training()->set_adam_eps(1e-6);
  mt::v1::JobSpec small = spec;
  small.mutable_training()->set_micro_batch_size(2);
  mt::v1::JobSpec large = spec;
  large.mutable_training()->set_micro_batch_size(8);
  auto a = MakeTrainer(small, Source(4096));
  auto b = MakeTrainer(large, Source(4096));
  EXPECT_EQ(a->plan().num_micro_batches, 4);
  EXPECT_EQ(b->plan().num_micro_batches, 1);
  for (int step = 0; step < 2; ++step) {
    MT_ASSERT_OK_AND_ASSIGN(StepMetrics ma, a->Step());
    MT_ASSERT_OK_AND_ASSIGN(StepMetrics mb, b->Step());
    EXPECT_NEAR(ma.loss, mb.loss, 1e-6) << "step " << step + 1;
    EXPECT_NEAR(ma.grad_norm, mb.grad_norm, 1e-6 * mb.grad_norm);
    EXPECT_EQ(ma.tokens, 8 * kSeq);
    EXPECT_LE(MaxParamDiff(a->model(), b->model()), 1e-6) << "step " << step + 1;
  }
}

// Dynamic loss scaling at a scale where the scaled loss overflows fp32: steps are skipped
// (nothing changes), the scale halves once the hysteresis is spent, and training proceeds
// once it fits. fp16 cannot run on the CPU, so fp32 with forced dynamic scaling.
TEST(TrainerTest, LossScalerSkipsOverflowingSteps) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_initial_loss_scale(std::ldexp(1.0, 127));
  spec.mutable_training()->set_hysteresis(2);
  spec.mutable_training()->set_loss_scale_window(1000);
  TrainerOptions options = QuietOptions();
  options.force_dynamic_loss_scaling = true;
  auto trainer = MakeTrainer(spec, Source(4096), nullptr, options);
  const torch::Tensor initial = trainer->optimizer().master_params().clone();

  std::vector<StepMetrics> steps;
  while (steps.size() < 40) {
    MT_ASSERT_OK_AND_ASSIGN(StepMetrics m, trainer->Step());
    steps.push_back(m);
    if (!m.skipped) break;
    // A skipped step changes neither the weights nor the optimizer state.
    EXPECT_EQ(trainer->optimizer().step_count(), 0);
    EXPECT_TRUE(torch::equal(trainer->optimizer().master_params(), initial));
    EXPECT_EQ(trainer->optimizer().exp_avg().abs().max().item<double>(), 0.0);
    EXPECT_EQ(trainer->optimizer().exp_avg_sq().abs().max().item<double>(), 0.0);
  }
  ASSERT_GE(steps.size(), 3u);
  ASSERT_FALSE(steps.back().skipped) << "never found a scale that fits";
  // Scales used: 2^127, 2^127 (hysteresis 2 -> 1), then halving on every further overflow.
  EXPECT_EQ(steps[0].loss_scale, std::ldexp(1.0, 127));
  EXPECT_EQ(steps[1].loss_scale, std::ldexp(1.0, 127));
  for (size_t i = 2; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].loss_scale, std::ldexp(1.0, 127 - static_cast<int>(i) + 1)) << i;
  }
  EXPECT_EQ(steps.back().skipped_total, static_cast<int64_t>(steps.size()) - 1);
  EXPECT_EQ(trainer->skipped_iterations(), static_cast<int64_t>(steps.size()) - 1);
  EXPECT_EQ(trainer->optimizer().step_count(), 1);
  EXPECT_FALSE(torch::equal(trainer->optimizer().master_params(), initial));
  EXPECT_TRUE(std::isfinite(steps.back().grad_norm));
  RecordProperty("skipped_steps", static_cast<int>(steps.size()) - 1);
}

TEST(TrainerTest, LossScaleDoublesAfterTheWindow) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_initial_loss_scale(1024);
  spec.mutable_training()->set_loss_scale_window(3);
  TrainerOptions options = QuietOptions();
  options.force_dynamic_loss_scaling = true;
  auto trainer = MakeTrainer(spec, Source(4096), nullptr, options);
  const auto steps = RunSteps(*trainer, 7);
  const double want[] = {1024, 1024, 1024, 2048, 2048, 2048, 4096};
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].loss_scale, want[i]) << i;
    EXPECT_FALSE(steps[i].skipped);
  }
  EXPECT_EQ(trainer->loss_scaler().scale(), 4096);
}

// The lr of each step follows the schedule (Megatron: step i uses the rate after i global
// batches, so the first warmup step runs at 0).
TEST(TrainerTest, LearningRateFollowsSchedule) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_lr_warmup_iters(2);
  spec.mutable_training()->set_lr_decay_style(mt::v1::LR_DECAY_STYLE_LINEAR);
  spec.mutable_training()->set_min_lr(1e-4);
  spec.mutable_training()->set_train_iters(6);
  auto trainer = MakeTrainer(spec, Source(4096));
  const auto steps = RunSteps(*trainer, 6);
  const double want[] = {
      0.0, 5e-4, 1e-3, 1e-4 + 0.75 * 9e-4, 1e-4 + 0.5 * 9e-4, 1e-4 + 0.25 * 9e-4};
  for (size_t i = 0; i < steps.size(); ++i)
    EXPECT_NEAR(steps[i].learning_rate, want[i], 1e-15) << i;
  EXPECT_EQ(steps[5].consumed_samples, 24);
}

// Evaluation: no dropout, no gradients; at a tiny init std the loss is ln(128) and the
// perplexity 128. Train() evaluates every eval_interval steps and after the last one.
TEST(TrainerTest, EvaluatesOnSchedule) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_model()->set_init_method_std(0.002);
  spec.mutable_model()->set_hidden_dropout(0.1);
  spec.mutable_evaluation()->set_eval_interval(4);
  spec.mutable_evaluation()->set_eval_iters(2);
  auto trainer = MakeTrainer(spec, Source(4096), Source(4096, 99));
  MT_ASSERT_OK_AND_ASSIGN(EvalMetrics first, trainer->Evaluate());
  EXPECT_NEAR(first.loss, std::log(128.0), 0.01 * std::log(128.0));
  EXPECT_NEAR(first.perplexity, std::exp(first.loss), 1e-9);
  EXPECT_EQ(first.batches, 2);
  std::vector<int64_t> eval_at;
  int steps = 0;
  MT_ASSERT_OK(trainer->Train([&](const StepMetrics&) { return ++steps > 0; },
                              [&](const EvalMetrics& e) { eval_at.push_back(e.iteration); }));
  EXPECT_EQ(steps, 10);
  EXPECT_THAT(eval_at, ::testing::ElementsAre(4, 8, 10));
}

// An evaluation tells its activity at every micro-batch, not only when it starts: the hang
// detector counts each beacon as a move, and an evaluation of many batches can outlast its
// timeout (60 s, or 10 x p99 step time: 100 forward-only batches of a large model do).
TEST(TrainerTest, EvaluationTellsItsActivityAtEveryMicroBatch) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_micro_batch_size(2);  // 2 micro-batches per global batch
  spec.mutable_evaluation()->set_eval_iters(3);
  TrainerOptions options = QuietOptions();
  std::vector<std::pair<Activity, int64_t>> told;
  options.on_activity = [&told](Activity a, int64_t step) { told.emplace_back(a, step); };
  auto trainer = MakeTrainer(spec, Source(4096), Source(4096, 99), options);
  MT_ASSERT_OK(trainer->Step().status());
  told.clear();
  MT_ASSERT_OK(trainer->Evaluate().status());
  const int64_t micro_batches = 3 * trainer->plan().num_micro_batches;
  ASSERT_GT(trainer->plan().num_micro_batches, 1);
  using Told = std::vector<std::pair<Activity, int64_t>>;
  const Told want(static_cast<size_t>(micro_batches), {Activity::kEval, 1});
  EXPECT_EQ(told, want);
}

TEST(TrainerTest, TrainStopsWhenCallbackSaysSo) {
  auto trainer = MakeTrainer(TinySpec(), Source(4096));
  MT_ASSERT_OK(trainer->Train([](const StepMetrics& m) { return m.iteration < 3; }));
  EXPECT_EQ(trainer->iteration(), 3);
}

TEST(TrainerTest, TrainSamplesGiveIterations) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->clear_train_iters();
  spec.mutable_training()->set_train_samples(42);  // 42 / 4 = 10 (rounded down)
  auto trainer = MakeTrainer(spec, Source(4096));
  EXPECT_EQ(trainer->plan().train_iterations, 10);
  EXPECT_EQ(trainer->lr_schedule().config().decay_steps, 42);
}

TEST(TrainerTest, Bf16OnCpuTrains) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_precision(mt::v1::PRECISION_BF16);
  spec.mutable_training()->set_lr(1e-2);
  auto trainer = MakeTrainer(spec, Source(4 * kSeq));
  const auto steps = RunSteps(*trainer, 15);
  ASSERT_EQ(steps.size(), 15u);
  EXPECT_LT(steps.back().loss, steps.front().loss - 1.0);
  EXPECT_EQ(trainer->optimizer().master_params().scalar_type(), torch::kFloat);
  EXPECT_EQ(trainer->model().embedding->word_embeddings->weight.scalar_type(), torch::kBFloat16);
}

// An evaluation-only trainer (TrainerOptions::evaluation_only) builds the same model without
// an optimizer: the optimizer's parameters under the same names and values, the same
// evaluation bit for bit, and a step refused with a clear error.
TEST(TrainerTest, EvaluationOnlyBuildsNoOptimizerAndEvaluatesAlike) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_precision(mt::v1::PRECISION_BF16);
  spec.mutable_evaluation()->set_eval_iters(2);
  TrainerOptions options = QuietOptions();
  options.evaluation_only = true;
  auto full = MakeTrainer(spec, Source(4096), Source(4096, 99));
  auto eval = MakeTrainer(spec, Source(4096), Source(4096, 99), options);
  ASSERT_NE(full, nullptr);
  ASSERT_NE(eval, nullptr);
  EXPECT_TRUE(full->has_optimizer());
  EXPECT_FALSE(eval->has_optimizer());
  std::vector<std::string> slots, names;
  for (const auto& slot : full->optimizer().slots()) slots.push_back(slot.name);
  for (const auto& [name, param] : eval->Parameters()) {
    names.push_back(name);
    EXPECT_EQ(param.scalar_type(), torch::kBFloat16) << name;
  }
  std::sort(slots.begin(), slots.end());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, slots);
  EXPECT_EQ(MaxParamDiff(full->model(), eval->model()), 0.0);
  MT_ASSERT_OK_AND_ASSIGN(EvalMetrics a, full->Evaluate());
  MT_ASSERT_OK_AND_ASSIGN(EvalMetrics b, eval->Evaluate());
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_THAT(eval->Step().status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("evaluation only")));
  EXPECT_THAT(eval->Train(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(TrainerTest, MfuIsPerDevice) {
  // A job on 4 devices: the same tokens/s is a quarter of the utilisation of each device.
  TrainerOptions options = QuietOptions();
  options.peak_flops_per_second = 1e12;
  options.num_devices = 4;
  auto trainer = MakeTrainer(TinySpec(), Source(4096), nullptr, options);
  const auto steps = RunSteps(*trainer, 2);
  ASSERT_EQ(steps.size(), 2u);
  const StepMetrics& m = steps.back();
  EXPECT_NEAR(m.mfu, m.tokens_per_second / 4 * trainer->plan().flops_per_token / 1e12, 1e-12);
}

// Log steps (every 5th and the last) carry the interval's rate: its tokens over the sum of its
// steps' seconds (the steps since the previous log step); other steps carry 0.
TEST(TrainerTest, LogStepsCarryTheIntervalsRate) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_train_iters(7);
  TrainerOptions options = QuietOptions();
  options.peak_flops_per_second = 1e12;
  options.num_devices = 2;
  auto trainer = MakeTrainer(spec, Source(4096), nullptr, options);
  const auto steps = RunSteps(*trainer, 7);
  ASSERT_EQ(steps.size(), 7u);
  int first = 0;
  for (int i = 0; i < 7; ++i) {
    const bool log_step = i + 1 == 5 || i + 1 == 7;
    if (!log_step) {
      EXPECT_EQ(steps[i].interval_tokens_per_second, 0.0) << "step " << i + 1;
      EXPECT_EQ(steps[i].interval_mfu, 0.0) << "step " << i + 1;
      continue;
    }
    double tokens = 0, seconds = 0;
    for (int k = first; k <= i; ++k) {
      tokens += static_cast<double>(steps[k].tokens);
      seconds += steps[k].seconds;
    }
    first = i + 1;
    ASSERT_GT(seconds, 0.0);
    EXPECT_NEAR(steps[i].interval_tokens_per_second, tokens / seconds, 1e-9 * tokens / seconds)
        << "step " << i + 1;
    EXPECT_NEAR(steps[i].interval_mfu,
                tokens / seconds / 2 * trainer->plan().flops_per_token / 1e12, 1e-12)
        << "step " << i + 1;
  }
}

// Without sync_every_step, only log steps (every 5th and the last) read the device: other steps
// report NaN, and a log step's interval_loss is the mean of the interval's losses, which a
// twin trainer syncing every step sees one by one (same computation: equal to 1e-12).
TEST(TrainerTest, LossIsReadAtLogStepsOnly) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_train_iters(7);
  TrainerOptions lazy = QuietOptions();
  lazy.sync_every_step = false;
  auto a = MakeTrainer(spec, Source(4096), nullptr, lazy);
  auto b = MakeTrainer(spec, Source(4096));
  const auto got = RunSteps(*a, 7);
  const auto want = RunSteps(*b, 7);
  ASSERT_EQ(got.size(), 7u);
  ASSERT_EQ(want.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    const bool log_step = i + 1 == 5 || i + 1 == 7;
    EXPECT_EQ(got[i].synced, log_step) << "step " << i + 1;
    EXPECT_TRUE(want[i].synced);
    if (log_step) {
      EXPECT_NEAR(got[i].loss, want[i].loss, 1e-12) << "step " << i + 1;
      EXPECT_NEAR(got[i].grad_norm, want[i].grad_norm, 1e-12) << "step " << i + 1;
    } else {
      EXPECT_TRUE(std::isnan(got[i].loss)) << "step " << i + 1;
      EXPECT_TRUE(std::isnan(got[i].interval_loss)) << "step " << i + 1;
    }
  }
  const double first =
      (want[0].loss + want[1].loss + want[2].loss + want[3].loss + want[4].loss) / 5;
  EXPECT_NEAR(got[4].interval_loss, first, 1e-12);
  EXPECT_NEAR(got[6].interval_loss, (want[5].loss + want[6].loss) / 2, 1e-12);
  EXPECT_NEAR(want[4].interval_loss, first, 1e-12);
  EXPECT_EQ(got[6].skipped_total, 0);
}

TEST(TrainerTest, MetricsAndProgressLine) {
  mt::v1::JobSpec spec = TinySpec();
  TrainerOptions options = QuietOptions();
  options.log_progress = true;
  options.peak_flops_per_second = 1e12;
  auto trainer = MakeTrainer(spec, Source(4096), nullptr, options);
  ::testing::internal::CaptureStderr();
  const auto steps = RunSteps(*trainer, 5);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(steps.size(), 5u);
  EXPECT_THAT(err, HasSubstr("step 5/10 | loss "));
  EXPECT_THAT(err, HasSubstr("| lr 1.000e-03 | grad norm "));
  EXPECT_THAT(err, HasSubstr("| loss scale 1 | skipped 0 | "));
  EXPECT_THAT(err, HasSubstr(" tokens/s | "));
  EXPECT_THAT(err, HasSubstr(" ms/step | MFU "));
  EXPECT_THAT(err, HasSubstr("| mem "));
  EXPECT_THAT(err, HasSubstr("| ETA "));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("step 4/10")));  // one line per log_interval
  const StepMetrics& m = steps.back();
  EXPECT_EQ(m.iteration, 5);
  EXPECT_EQ(m.train_iterations, 10);
  EXPECT_EQ(m.tokens, 4 * kSeq);
  EXPECT_GT(m.seconds, 0);
  EXPECT_NEAR(m.tokens_per_second, m.tokens / m.seconds, 1e-6 * m.tokens_per_second);
  EXPECT_NEAR(m.mfu, m.tokens_per_second * trainer->plan().flops_per_token / 1e12, 1e-12);
  EXPECT_EQ(trainer->plan().num_parameters, model::CountParameters(trainer->model().config()));

  EXPECT_GE(m.data_seconds, 0.0);
  EXPECT_LE(m.data_seconds, m.seconds);
  const MemoryStats mem = trainer->memory();
  EXPECT_FALSE(mem.is_cuda);
  EXPECT_GT(mem.allocated_bytes, 1 << 20);  // this process's RSS
}

TEST(TrainerTest, CreateRejectsWhatItCannotRun) {
  auto create = [](const mt::v1::JobSpec& spec, TrainerOptions o = QuietOptions()) {
    return Trainer::Create(spec, o, Source(4096), nullptr).status();
  };
  mt::v1::JobSpec tp = TinySpec();
  tp.mutable_parallel()->set_tensor_model_parallel_size(2);
  // tp > 1 needs the TP group of a job's ranks (trainer_tp_test.cc), pp > 1 is not run here.
  EXPECT_THAT(create(tp), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tp=2")));
  mt::v1::JobSpec pp = TinySpec();
  pp.mutable_parallel()->set_pipeline_model_parallel_size(2);
  EXPECT_THAT(create(pp), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pp=2")));
  // dp > 1 needs collectives (a job's ranks), not a lone trainer.
  mt::v1::JobSpec dp = TinySpec();
  dp.mutable_parallel()->set_data_parallel_size(2);
  EXPECT_THAT(create(dp), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dp=2")));
  mt::v1::JobSpec fp16 = TinySpec();
  fp16.mutable_training()->set_precision(mt::v1::PRECISION_FP16);
  EXPECT_THAT(create(fp16), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fp16")));
  mt::v1::JobSpec batch = TinySpec();
  batch.mutable_training()->set_global_batch_size(6);
  EXPECT_THAT(create(batch), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("multiple")));
  mt::v1::JobSpec iters = TinySpec();
  iters.mutable_training()->clear_train_iters();
  EXPECT_THAT(create(iters),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("train_iters")));
  TrainerOptions tpu = QuietOptions();
  tpu.device = "tpu:0";
  EXPECT_THAT(create(TinySpec(), tpu),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tpu")));
  TrainerOptions bad_backend = QuietOptions();
  bad_backend.attention_backend = "flashy";
  EXPECT_THAT(create(TinySpec(), bad_backend),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("flashy")));
  // "cudnn" is a known name; a CPU trainer cannot run it (the model says why).
  TrainerOptions cudnn_on_cpu = QuietOptions();
  cudnn_on_cpu.attention_backend = "cudnn";
  EXPECT_THAT(create(TinySpec(), cudnn_on_cpu),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cudnn")));
  if (!torch::cuda::is_available()) {
    TrainerOptions cuda = QuietOptions();
    cuda.device = "cuda:0";
    EXPECT_THAT(create(TinySpec(), cuda),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("CUDA")));
  }
  EXPECT_THAT(Trainer::Create(TinySpec(), QuietOptions(), nullptr, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("data")));
}

// The trainer reads the resolved global batch (issue 14): an unresolved one is the front end's
// mistake, named as such, not a default derived a second time here.
TEST(TrainerTest, CreateWantsTheResolvedGlobalBatch) {
  mt::v1::JobSpec spec = TinySpec();
  spec.mutable_training()->set_global_batch_size(0);
  EXPECT_THAT(Trainer::Create(spec, QuietOptions(), Source(4096), nullptr).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(HasSubstr("training.global_batch_size"),
                                        HasSubstr("spec::ResolveForLayout"))));
  MT_ASSERT_OK(spec::ResolveForLayout(&spec, 1));
  MT_ASSERT_OK_AND_ASSIGN(auto trainer,
                          Trainer::Create(spec, QuietOptions(), Source(4096), nullptr));
  EXPECT_EQ(trainer->plan().global_batch_size, 4);
  EXPECT_EQ(trainer->plan().num_micro_batches, 1);
}

TEST(TrainerTest, BadDataIsAnErrorNotACrash) {
  auto s = TokenSequenceSource::Create({1, 2, 3, 500}, kSeq);  // 500 >= vocabulary 128
  ASSERT_TRUE(s.ok());
  auto trainer = MakeTrainer(TinySpec(), std::move(*s));
  EXPECT_THAT(trainer->Step().status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the vocabulary")));
  EXPECT_THAT(trainer->Evaluate().status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("validation")));
}

}  // namespace
}  // namespace mt::engine::trainer_test
