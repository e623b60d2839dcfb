// The trainer with tensor parallelism: two ranks (one thread each, Gloo TP group) train the
// tiny GPT for 5 steps and report, step by step, the losses of the one-device trainer with
// the same seed and data, with and without sequence parallelism. fp32, no dropout, no
// gradient clipping (the global norm across TP ranks is the optimizer's); tolerance 1e-5
// relative.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/trainer.h"
#include "worker/model/gpt.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"

namespace mt::engine {
namespace {

constexpr int64_t kSeq = 16;
constexpr int64_t kVocab = 256;  // a multiple of 128 * 2: TP 1 and 2 pad it alike
constexpr int kSteps = 5;

mt::v1::JobSpec Spec(int tp, bool sequence_parallel) {
  testutil::TinySpecOptions o;
  o.hidden_size = 64;
  o.seq_length = kSeq;
  o.vocab_size = kVocab;
  o.global_batch_size = 4;  // two micro-batches: gradients accumulate
  o.train_iters = kSteps;
  o.lr = 3e-3;
  o.seed = 77;
  o.zero_dropout = true;
  o.constant_lr = true;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  spec.mutable_training()->set_clip_grad(0.0);
  spec.mutable_parallel()->set_tensor_model_parallel_size(tp);
  spec.mutable_parallel()->set_sequence_parallel(sequence_parallel);
  spec.mutable_evaluation()->set_eval_interval(0);
  return spec;
}

std::unique_ptr<BatchSource> Source() {
  auto s = TokenSequenceSource::Create(SyntheticTokens(8192, kVocab, 5), kSeq);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

std::vector<double> Losses(Trainer& trainer) {
  std::vector<double> out;
  for (int i = 0; i < kSteps; ++i) {
    auto m = trainer.Step();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) break;
    out.push_back(m->loss);
  }
  return out;
}

class TrainerTensorParallelTest : public ::testing::TestWithParam<bool> {};

TEST_P(TrainerTensorParallelTest, TwoRanksReportTheOneDeviceLosses) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  const bool sp = GetParam();
  TrainerOptions quiet;
  quiet.log_progress = false;
  quiet.attention_backend = "math";
  quiet.sync_every_step = true;  // every step's loss is compared
  auto single = Trainer::Create(Spec(1, false), quiet, Source(), nullptr);
  ASSERT_TRUE(single.ok()) << single.status();
  const std::vector<double> want = Losses(**single);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  // The steps change the weights (new batches each step: the loss need not fall in 5 steps).
  EXPECT_GT(
      *std::max_element(want.begin(), want.end()) - *std::min_element(want.begin(), want.end()),
      1e-3);

  std::vector<std::vector<double>> got(2);
  const auto errors = parallel::testing::RunRanks(
      parallel::testing::LayoutOf(2, 1, 1),
      [&](int rank, std::shared_ptr<parallel::ProcessGroups> groups) {
        TrainerOptions o = quiet;
        o.groups = groups;
        auto trainer = Trainer::Create(Spec(2, sp), o, Source(), nullptr);
        ASSERT_TRUE(trainer.ok()) << trainer.status();
        EXPECT_EQ((*trainer)->model().shard().tp_size, 2);
        got[rank] = Losses(**trainer);
      });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(got[rank].size(), want.size()) << "rank " << rank;
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_NEAR(got[rank][i], want[i], 1e-5 * want[i]) << "rank " << rank << " step " << i + 1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SequenceParallel, TrainerTensorParallelTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("tp2_sp") : std::string("tp2");
                         });

}  // namespace
}  // namespace mt::engine
