// Pipeline-parallel trainers in one process (one thread per stage, Gloo over a HashStore): a
// tiny fp32 GPT (4 layers, hidden 32, 4 heads, seq 16, vocabulary 128) split over 2 and 4
// stages, interleaved (2 chunks per stage) and with --overlap-p2p-comm, gives the losses and
// gradient norms of the one-stage trainer over 5 steps within 1e-5 relative (fp32; the
// stages sum the same gradients in a different order), with gradient clipping active, and
// keeps the tied embedding's two copies equal.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/layout/job_layout.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/data_sources.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/trainer.h"
#include "worker/model/gpt.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/process_groups.h"

namespace mt::engine {
namespace {

constexpr int64_t kSeq = 16;
constexpr int64_t kVocab = 128;
constexpr int kSteps = 5;
constexpr double kRelTol = 1e-5;

mt::v1::JobSpec Spec(int pp, int layers_per_virtual_stage, bool overlap) {
  mt::v1::JobSpec spec;
  auto* m = spec.mutable_model();
  m->set_num_layers(4);
  m->set_hidden_size(32);
  m->set_num_attention_heads(4);
  m->set_seq_length(kSeq);
  m->set_vocab_size(kVocab);
  m->set_hidden_dropout(0.0);
  m->set_attention_dropout(0.0);
  auto* p = spec.mutable_parallel();
  p->set_pipeline_model_parallel_size(pp);
  p->set_data_parallel_size(1);
  p->set_num_layers_per_virtual_pipeline_stage(layers_per_virtual_stage);
  p->set_overlap_p2p_comm(overlap);
  auto* t = spec.mutable_training();
  t->set_micro_batch_size(2);
  t->set_global_batch_size(8);  // 4 micro-batches
  t->set_train_iters(kSteps);
  t->set_lr(1e-2);  // large enough that clip_grad 1.0 clips the first steps
  t->set_lr_decay_style(mt::v1::LR_DECAY_STYLE_CONSTANT);
  t->set_clip_grad(1.0);
  t->set_seed(1234);
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_evaluation()->set_eval_iters(2);
  spec.mutable_logging()->set_log_interval(1);
  mt::spec::ApplyDefaults(&spec);  // as a job's ranks get it
  return spec;
}

std::unique_ptr<BatchSource> Source(uint64_t seed) {
  auto s = TokenSequenceSource::Create(SyntheticTokens(8192, kVocab, seed), kSeq);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

TrainerOptions Quiet() {
  TrainerOptions o;
  o.log_progress = false;
  o.attention_backend = "math";
  return o;
}

struct RunResult {
  std::vector<double> losses, norms;
  double eval_loss = 0;
  bool clipped = false;  // some step's norm was above clip_grad
};

RunResult RunOneStage() {
  auto t = Trainer::Create(Spec(1, 0, false), Quiet(), Source(7), Source(8));
  EXPECT_TRUE(t.ok()) << t.status();
  RunResult r;
  if (!t.ok()) return r;
  for (int i = 0; i < kSteps; ++i) {
    auto m = (*t)->Step();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return r;
    r.losses.push_back(m->loss);
    r.norms.push_back(m->grad_norm);
    r.clipped = r.clipped || m->grad_norm > 1.0;
  }
  auto e = (*t)->Evaluate();
  EXPECT_TRUE(e.ok()) << e.status();
  if (e.ok()) r.eval_loss = e->loss;
  return r;
}

struct Case {
  int pp;
  int layers_per_virtual_stage;  // 0 = no interleaving
  bool overlap;
};

class TrainerPipelineTest : public ::testing::TestWithParam<Case> {};

TEST_P(TrainerPipelineTest, StagesGiveTheOneStageLossesAndNorms) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  at::set_num_threads(1);
  const Case c = GetParam();
  const RunResult want = RunOneStage();
  ASSERT_EQ(want.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_TRUE(want.clipped) << "the test means to exercise clipping across stages";

  const mt::v1::JobSpec spec = Spec(c.pp, c.layers_per_virtual_stage, c.overlap);
  auto layout = mt::layout::JobLayout(spec, c.pp);
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> errors(c.pp);
  std::vector<RunResult> got(c.pp);
  std::vector<torch::Tensor> tied(c.pp);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < c.pp; ++rank) {
    threads.emplace_back([&, rank] {
      auto fail = [&](const absl::Status& s) { errors[rank] = s.ToString(); };
      auto groups = parallel::ProcessGroups::Create(*layout, rank, store, "gloo",
                                                    std::chrono::milliseconds(60000));
      if (!groups.ok()) return fail(groups.status());
      auto collectives = parallel::MakeCollectives(*groups, 1 << 20);
      TrainerOptions o = Quiet();
      o.groups = *groups;
      o.collectives = collectives.get();
      auto t = Trainer::Create(spec, o, Source(7), Source(8));
      if (!t.ok()) return fail(t.status());
      for (int i = 0; i < kSteps; ++i) {
        auto m = (*t)->Step();
        if (!m.ok()) return fail(m.status());
        got[rank].losses.push_back(m->loss);
        got[rank].norms.push_back(m->grad_norm);
      }
      auto e = (*t)->Evaluate();
      if (!e.ok()) return fail(e.status());
      got[rank].eval_loss = e->loss;
      // The tied word embedding: the first stage's and the last stage's copy.
      for (const auto& p : (*t)->optimizer().slots()) {
        if (p.name == "embedding.word_embeddings.weight" ||
            p.name == model::GptModel::kSharedOutputWeightName) {
          tied[rank] = p.param.detach().clone();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < c.pp; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  for (int r = 0; r < c.pp; ++r) {
    ASSERT_EQ(got[r].losses.size(), static_cast<size_t>(kSteps));
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_NEAR(got[r].losses[i], want.losses[i], kRelTol * want.losses[i])
          << "rank " << r << " step " << i + 1;
      EXPECT_NEAR(got[r].norms[i], want.norms[i], kRelTol * want.norms[i])
          << "rank " << r << " step " << i + 1;
    }
    EXPECT_NEAR(got[r].eval_loss, want.eval_loss, kRelTol * want.eval_loss) << "rank " << r;
  }
  ASSERT_TRUE(tied[0].defined());
  ASSERT_TRUE(tied[c.pp - 1].defined());
  EXPECT_TRUE(torch::equal(tied[0], tied[c.pp - 1]))
      << "max difference " << (tied[0] - tied[c.pp - 1]).abs().max().item<double>();
}

INSTANTIATE_TEST_SUITE_P(Layouts, TrainerPipelineTest,
                         ::testing::Values(Case{2, 0, false}, Case{4, 0, false}, Case{2, 1, false},
                                           Case{2, 1, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat("pp", info.param.pp, "_vs",
                                               info.param.layers_per_virtual_stage,
                                               info.param.overlap ? "_overlap" : "");
                         });

// Data parallelism under pipeline parallelism, PP 2 x DP 2 (4 rank threads), plain and
// interleaved (2 chunks of 1 layer per stage), 16 samples per step (4 micro-batches per
// pipeline), small DP buckets (2000 elements: several per stage).
struct PipelineDpRun {
  // Per rank: each step's loss and grad norm, the buckets a hook started during backward, and
  // the parameter gathers the step's forward waited for (the previous step's).
  std::vector<std::vector<double>> losses, norms;
  std::vector<std::vector<size_t>> started_in_backward;
  std::vector<std::vector<std::vector<MixedPrecisionOptimizer::GatherWait>>> gather_waits;
  std::vector<size_t> buckets;
};

PipelineDpRun RunPipelineDp(int layers_per_virtual_stage, bool overlap_grad_reduce,
                            bool distributed_optimizer, bool overlap_param_gather) {
  constexpr int kPp = 2, kDp = 2, kWorld = kPp * kDp;
  mt::v1::JobSpec spec = Spec(kPp, layers_per_virtual_stage, false);
  spec.mutable_training()->set_global_batch_size(16);
  auto* p = spec.mutable_parallel();
  p->set_data_parallel_size(kDp);
  p->set_ddp_bucket_size(2000);
  p->set_overlap_grad_reduce(overlap_grad_reduce);
  p->set_use_distributed_optimizer(distributed_optimizer);
  p->set_overlap_param_gather(overlap_param_gather);
  PipelineDpRun run;
  run.losses.resize(kWorld);
  run.norms.resize(kWorld);
  run.started_in_backward.resize(kWorld);
  run.gather_waits.resize(kWorld);
  run.buckets.resize(kWorld);
  auto layout = mt::layout::JobLayout(spec, kWorld);
  EXPECT_TRUE(layout.ok()) << layout.status();
  if (!layout.ok()) return run;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      auto fail = [&](const absl::Status& s) { errors[rank] = s.ToString(); };
      auto groups = parallel::ProcessGroups::Create(*layout, rank, store, "gloo",
                                                    std::chrono::milliseconds(60000));
      if (!groups.ok()) return fail(groups.status());
      auto collectives = parallel::MakeCollectives(*groups, 1 << 20);
      TrainerOptions o = Quiet();
      o.groups = *groups;
      o.collectives = collectives.get();
      // Every stage of a pipeline reads its DP rank's slice of the same samples.
      auto t = Trainer::Create(
          spec, o, std::make_unique<DataParallelSlice>(Source(7), (*groups)->dp_rank(), kDp),
          nullptr);
      if (!t.ok()) return fail(t.status());
      run.buckets[rank] = (*t)->optimizer().buckets().size();
      for (int i = 0; i < kSteps; ++i) {
        auto m = (*t)->Step();
        if (!m.ok()) return fail(m.status());
        run.losses[rank].push_back(m->loss);
        run.norms[rank].push_back(m->grad_norm);
        run.started_in_backward[rank].push_back((*t)->optimizer().buckets_started_in_backward());
        run.gather_waits[rank].push_back((*t)->optimizer().last_gather_waits());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return run;
}

// --overlap-grad-reduce under pipeline parallelism: each model chunk's last backward arms its
// gradient hooks, so on every rank buckets start during backward (all but the tied
// embedding's and the ones after it, which wait for the embedding-group sum), and the losses
// and norms are exactly those of the same run without overlap (the same sums over the same
// buckets, bit for bit). Then --use-distributed-optimizer with --overlap-param-gather (and the
// overlapped reduction) against the distributed optimizer alone: exactly the same losses, and
// from the second step on each rank's forward waits for the parameter buckets part by part in
// forward order -- the first part runs while later buckets' gathers are still in flight --
// having waited for every bucket by the end of the forward.
class PipelineOverlapTest : public ::testing::TestWithParam<int> {};

TEST_P(PipelineOverlapTest, OverlapGivesTheSameLossesAndStartsBucketsEarly) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  at::set_num_threads(1);
  const int lpvs = GetParam();
  const PipelineDpRun plain = RunPipelineDp(lpvs, false, false, false);
  const PipelineDpRun overlap = RunPipelineDp(lpvs, true, false, false);
  const PipelineDpRun distopt = RunPipelineDp(lpvs, false, true, false);
  const PipelineDpRun gather = RunPipelineDp(lpvs, true, true, true);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(plain.losses[r].size(), static_cast<size_t>(kSteps)) << "rank " << r;
    ASSERT_EQ(overlap.losses[r].size(), static_cast<size_t>(kSteps)) << "rank " << r;
    ASSERT_EQ(distopt.losses[r].size(), static_cast<size_t>(kSteps)) << "rank " << r;
    ASSERT_EQ(gather.losses[r].size(), static_cast<size_t>(kSteps)) << "rank " << r;
    EXPECT_GT(plain.buckets[r], 2u) << "rank " << r;
    for (int i = 0; i < kSteps; ++i) {
      const std::string where = absl::StrCat("rank ", r, " step ", i + 1);
      EXPECT_EQ(overlap.losses[r][i], plain.losses[r][i]) << where;
      EXPECT_EQ(overlap.norms[r][i], plain.norms[r][i]) << where;
      EXPECT_EQ(gather.losses[r][i], distopt.losses[r][i]) << where;
      EXPECT_EQ(gather.norms[r][i], distopt.norms[r][i]) << where;
      EXPECT_NEAR(distopt.losses[r][i], plain.losses[r][i], kRelTol * plain.losses[r][i]) << where;
      EXPECT_EQ(plain.started_in_backward[r][i], 0u) << where;
      EXPECT_GT(overlap.started_in_backward[r][i], 0u) << where;
      EXPECT_LT(overlap.started_in_backward[r][i], overlap.buckets[r]) << where;  // tied: late
      EXPECT_GT(gather.started_in_backward[r][i], 0u) << where;
      EXPECT_TRUE(distopt.gather_waits[r][i].empty()) << where;  // Step waited for them
      if (i == 0) continue;  // the first forward has no gathers to wait for
      const auto& waits = gather.gather_waits[r][i];
      ASSERT_GT(waits.size(), 1u) << where << ": waited for every bucket at once";
      int waited = 0;
      for (size_t k = 0; k < waits.size(); ++k) {
        if (k > 0) {
          EXPECT_GT(waits[k].part, waits[k - 1].part) << where;
        }
        waited += waits[k].buckets;
      }
      EXPECT_EQ(waits.front().part, 0) << where;
      EXPECT_GT(waits.front().still_pending, 0) << where;
      EXPECT_EQ(waits.back().still_pending, 0) << where;
      EXPECT_EQ(waited, static_cast<int>(gather.buckets[r])) << where;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineOverlapTest, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("pp2dp2") : std::string("pp2v2dp2");
                         });

TEST(TrainerPipeline, ALoneTrainerRejectsPipelineParallelism) {
  auto t = Trainer::Create(Spec(2, 0, false), Quiet(), Source(7), nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("pp=2"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace mt::engine
