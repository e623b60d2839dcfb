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
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/layout/job_layout.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/data_sources.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/trainer.h"
#include "worker/model/gpt.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"

namespace mt::engine {
namespace {

constexpr int64_t kSeq = 16;
constexpr int64_t kVocab = 128;
constexpr int kSteps = 5;
constexpr double kRelTol = 1e-5;

mt::v1::JobSpec Spec(int pp, int layers_per_virtual_stage, bool overlap) {
  testutil::TinySpecOptions o;
  o.num_layers = 4;
  o.seq_length = kSeq;
  o.vocab_size = kVocab;
  o.global_batch_size = 8;  // 4 micro-batches
  o.train_iters = kSteps;
  o.lr = 1e-2;  // large enough that clip_grad 1.0 clips the first steps
  o.zero_dropout = true;
  o.constant_lr = true;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  auto* p = spec.mutable_parallel();
  p->set_pipeline_model_parallel_size(pp);
  p->set_data_parallel_size(1);
  p->set_num_layers_per_virtual_pipeline_stage(layers_per_virtual_stage);
  p->set_overlap_p2p_comm(overlap);
  spec.mutable_training()->set_clip_grad(1.0);
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_evaluation()->set_eval_iters(2);
  spec.mutable_logging()->set_log_interval(1);
  mt::spec::ApplyDefaults(&spec);  // as a job's ranks get it
  return spec;
}

// A rank thread's failure, for parallel::testing::RunRanks to report as that rank's error.
void Fail(const absl::Status& s) { throw std::runtime_error(s.ToString()); }

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
  int eval_told = 0;     // kEval activities told by the evaluation
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
  std::vector<RunResult> got(c.pp);
  std::vector<torch::Tensor> tied(c.pp);
  const std::vector<std::string> errors = parallel::testing::RunRanks(
      *layout, [&](int rank, std::shared_ptr<parallel::ProcessGroups> groups) {
        auto collectives = parallel::MakeCollectives(groups, 1 << 20);
        TrainerOptions o = Quiet();
        o.groups = groups;
        o.collectives = collectives.get();
        // Every stage tells its evaluation at every global batch (beacons for the hang
        // detector: activity.h).
        bool evaluating = false;
        int eval_told = 0;
        o.on_activity = [&](Activity a, int64_t) {
          eval_told += evaluating && a == Activity::kEval;
        };
        auto t = Trainer::Create(spec, o, Source(7), Source(8));
        if (!t.ok()) return Fail(t.status());
        for (int i = 0; i < kSteps; ++i) {
          auto m = (*t)->Step();
          if (!m.ok()) return Fail(m.status());
          got[rank].losses.push_back(m->loss);
          got[rank].norms.push_back(m->grad_norm);
        }
        evaluating = true;
        auto e = (*t)->Evaluate();
        if (!e.ok()) return Fail(e.status());
        got[rank].eval_loss = e->loss;
        got[rank].eval_told = eval_told;
        // The tied word embedding: the first stage's and the last stage's copy.
        for (const auto& p : (*t)->optimizer().slots()) {
          if (p.name == "embedding.word_embeddings.weight" ||
              p.name == model::GptModel::kSharedOutputWeightName) {
            tied[rank] = p.param.detach().clone();
          }
        }
      });
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
    EXPECT_EQ(got[r].eval_told, 2) << "rank " << r;  // eval_iters global batches
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
  const std::vector<std::string> errors = parallel::testing::RunRanks(
      *layout, [&](int rank, std::shared_ptr<parallel::ProcessGroups> groups) {
        auto collectives = parallel::MakeCollectives(groups, 1 << 20);
        TrainerOptions o = Quiet();
        o.groups = groups;
        o.collectives = collectives.get();
        // Every stage of a pipeline reads its DP rank's slice of the same samples.
        auto t = Trainer::Create(
            spec, o, std::make_unique<DataParallelSlice>(Source(7), groups->dp_rank(), kDp),
            nullptr);
        if (!t.ok()) return Fail(t.status());
        run.buckets[rank] = (*t)->optimizer().buckets().size();
        for (int i = 0; i < kSteps; ++i) {
          auto m = (*t)->Step();
          if (!m.ok()) return Fail(m.status());
          run.losses[rank].push_back(m->loss);
          run.norms[rank].push_back(m->grad_norm);
          run.started_in_backward[rank].push_back((*t)->optimizer().buckets_started_in_backward());
          run.gather_waits[rank].push_back((*t)->optimizer().last_gather_waits());
        }
      });
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
