// StepGraphBlocker's rules one setting at a time, and TrainerOptions::cuda_graph where the step
// cannot be captured (the CPU): the trainer runs the eager step, with the same losses bit for
// bit. The captured step itself is tested on the GPU (trainer_gpu_test.cc).
#include "worker/engine/step_graph.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/trainer.h"

namespace mt::engine {
namespace {

using ::testing::HasSubstr;

StepGraphSetting Capturable() {
  StepGraphSetting s;
  s.cuda = true;
  s.graphs_built = true;
  return s;
}

TEST(StepGraphBlockerTest, OneGpuOneMicroBatchIsCapturable) {
  EXPECT_EQ(StepGraphBlocker(Capturable()), "");
}

// Dropout draws from the generator at each replay, and recomputation without dropout or with
// only the dropout it does not rerun restores no generator state.
TEST(StepGraphBlockerTest, DropoutIsCapturableWhereNoRecomputationReplaysIt) {
  StepGraphSetting s = Capturable();
  s.hidden_dropout = 0.1;
  s.attention_dropout = 0.1;
  EXPECT_EQ(StepGraphBlocker(s), "");
  s = Capturable();
  s.recompute_full = true;
  EXPECT_EQ(StepGraphBlocker(s), "");
  s = Capturable();
  s.recompute_selective = true;
  s.hidden_dropout = 0.1;  // selective reruns the attention core only
  EXPECT_EQ(StepGraphBlocker(s), "");
}

TEST(StepGraphBlockerTest, EachSettingThatBlocksIsNamed) {
  const struct {
    void (*set)(StepGraphSetting*);
    const char* names;
  } cases[] = {
      {[](StepGraphSetting* s) { s->cuda = false; }, "not a GPU"},
      {[](StepGraphSetting* s) { s->graphs_built = false; }, "no CUDA graphs"},
      {[](StepGraphSetting* s) { s->data_parallel = 2; }, "parallel.dp/tp/pp are 2/1/1"},
      {[](StepGraphSetting* s) { s->tensor_parallel = 2; }, "parallel.dp/tp/pp are 1/2/1"},
      {[](StepGraphSetting* s) { s->pipeline_parallel = 4; }, "parallel.dp/tp/pp are 1/1/4"},
      {[](StepGraphSetting* s) { s->micro_batches = 3; }, "3 micro-batches a step"},
      {[](StepGraphSetting* s) {
         s->recompute_full = true;
         s->hidden_dropout = 0.1;
       },
       "training.recompute_granularity full with model.hidden_dropout 0.1"},
      {[](StepGraphSetting* s) {
         s->recompute_full = true;
         s->attention_dropout = 0.2;
       },
       "training.recompute_granularity full with model.attention_dropout 0.2"},
      {[](StepGraphSetting* s) {
         s->recompute_selective = true;
         s->attention_dropout = 0.1;
       },
       "training.recompute_granularity selective with model.attention_dropout 0.1"},
  };
  for (const auto& c : cases) {
    StepGraphSetting s = Capturable();
    c.set(&s);
    EXPECT_THAT(StepGraphBlocker(s), HasSubstr(c.names));
  }
  // The first reason is given: the device before the rest.
  StepGraphSetting s = Capturable();
  s.cuda = false;
  s.micro_batches = 2;
  EXPECT_THAT(StepGraphBlocker(s), HasSubstr("not a GPU"));
}

TEST(StepGraphTest, WithoutCudaRunIsAnErrorNotAStep) {
  if (StepGraph::Available()) GTEST_SKIP() << "a CUDA build: the GPU tests capture";
  StepGraph graph(torch::Device(torch::kCPU), {});
  int calls = 0;
  const auto got = graph.Run(
      torch::zeros({2, 3}),
      [&](const torch::Tensor&) {
        ++calls;
        return torch::Tensor();
      },
      [] { return absl::OkStatus(); });
  EXPECT_THAT(got.status(),
              mt::testing::StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA")));
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(graph.captured());
}

std::vector<double> Losses(bool cuda_graph, bool* captured) {
  testutil::TinySpecOptions o;
  o.micro_batch_size = 4;
  o.global_batch_size = 4;
  o.train_iters = 4;
  o.zero_dropout = true;
  o.constant_lr = true;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  spec.mutable_evaluation()->set_eval_interval(0);
  TrainerOptions options;
  options.log_progress = false;
  options.attention_backend = "math";
  options.sync_every_step = true;
  options.cuda_graph = cuda_graph;
  auto source = TokenSequenceSource::Create(SyntheticTokens(1 << 12, 128, 5), 16);
  EXPECT_TRUE(source.ok()) << source.status();
  auto trainer = Trainer::Create(spec, options, std::move(*source), nullptr);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  std::vector<double> losses;
  if (!trainer.ok()) return losses;
  for (int i = 0; i < 4; ++i) {
    auto m = (*trainer)->Step();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) break;
    losses.push_back(m->loss);
  }
  *captured = (*trainer)->step_graph_captured();
  return losses;
}

// On the CPU the flag changes nothing: the eager step, the same losses bit for bit.
TEST(StepGraphTest, TheCpuTrainerRunsTheEagerStepUnderTheFlag) {
  bool captured = true, plain_captured = true;
  const std::vector<double> with = Losses(true, &captured);
  const std::vector<double> without = Losses(false, &plain_captured);
  ASSERT_EQ(with.size(), 4u);
  EXPECT_EQ(with, without);
  EXPECT_FALSE(captured);
  EXPECT_FALSE(plain_captured);
}

}  // namespace
}  // namespace mt::engine
