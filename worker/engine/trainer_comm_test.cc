// What a training step records in the rank's communication recorder
// (worker/parallel/comm_stats.h, Trainer::TakeCommunication), for ranks as threads over Gloo:
// every collective the model structure, the pipeline table and the optimizer imply, exactly
// that many times, under its collective and group, each with time, and no more time than the
// step took. The tiny fp32 GPT: L = 2 layers, hidden 32, 4 heads, seq 16, micro-batches of 2.
//
// Tensor parallelism, per micro-batch (Megatron's mappings, tensor_parallel.h):
//   embedding       reduce-from (all-reduce forward)                           1 AR
//   each layer      qkv and fc1 copy-to (all-reduce backward), proj and fc2
//                   reduce-from (all-reduce forward)                           4 AR
//   output layer    copy-to (all-reduce backward)                              1 AR
//   cross entropy   max and (target logit, sum of exp) all-reduces (forward)   2 AR
// = 4L + 4 all-reduces. Under sequence parallelism each of those mappings is an all-gather one
// way and a reduce-scatter the other (Gloo: an all-reduce), the cross entropy unchanged:
// 4L + 4 all-reduces and 4L + 2 all-gathers, plus one all-reduce per step of the replicated
// parameters' gradients. Per step, the global norm all-reduces over the model-parallel group.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/layout/job_layout.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"
#include "tests/testutil/tiny_spec.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/trainer.h"
#include "worker/parallel/comm_stats.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/pipeline_schedule.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"

namespace mt::engine {
namespace {

constexpr int64_t kSeq = 16;
constexpr int64_t kVocab = 128;
constexpr int kLayers = 2;
constexpr int kSteps = 2;

using Key = std::pair<std::string, std::string>;  // (collective, group)
using Counts = std::map<Key, int64_t>;

struct Config {
  std::string name;
  int tp = 1, pp = 1, dp = 1;
  int micro_batches = 2;  // per pipeline per step
  bool sequence_parallel = false;
  bool distributed_optimizer = false;
  bool overlap_grad_reduce = false;
};

mt::v1::JobSpec Spec(const Config& c) {
  testutil::TinySpecOptions o;
  o.num_layers = kLayers;
  o.seq_length = kSeq;
  o.vocab_size = kVocab;
  o.global_batch_size = 2 * c.micro_batches * c.dp;
  o.train_iters = kSteps;
  o.seed = 5;
  o.zero_dropout = true;
  mt::v1::JobSpec spec = testutil::TinyGptSpec(o);
  auto* p = spec.mutable_parallel();
  p->set_tensor_model_parallel_size(c.tp);
  p->set_pipeline_model_parallel_size(c.pp);
  p->set_data_parallel_size(c.dp);
  p->set_sequence_parallel(c.sequence_parallel);
  p->set_use_distributed_optimizer(c.distributed_optimizer);
  p->set_overlap_grad_reduce(c.overlap_grad_reduce);
  p->set_ddp_bucket_size(10000);  // several gradient buckets
  spec.mutable_evaluation()->set_eval_interval(0);
  spec.mutable_logging()->set_log_interval(1);
  mt::spec::ApplyDefaults(&spec);
  return spec;
}

std::unique_ptr<BatchSource> Source() {
  auto s = TokenSequenceSource::Create(SyntheticTokens(8192, kVocab, 3), kSeq);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// Sends and receives in this stage's schedule table (1F1B, one chunk).
std::pair<int64_t, int64_t> PointToPoint(int stages, int micro_batches, int stage) {
  auto table = parallel::StageSchedule({stages, micro_batches, 1, false}, stage);
  EXPECT_TRUE(table.ok()) << table.status();
  int64_t sends = 0, recvs = 0;
  if (!table.ok()) return {sends, recvs};
  for (const parallel::PipelineAction& a : *table) {
    for (const parallel::P2POp& op : a.ops) (op.is_send() ? sends : recvs) += 1;
  }
  return {sends, recvs};
}

// What one step of `c` must record on `rank` (`buckets`: the optimizer's gradient buckets).
Counts Expected(const Config& c, const parallel::ProcessGroups& g, int64_t buckets) {
  Counts want;
  const int64_t m = c.micro_batches;
  const int64_t layers = kLayers / c.pp;  // on this stage
  if (c.tp > 1) {
    // The embedding's mapping on the first stage, the output's and the loss's on the last.
    const int64_t first = g.is_first_stage() ? 1 : 0;
    const int64_t last = g.is_last_stage() ? 1 : 0;
    want[{"all_reduce", "tp"}] = m * (first + 4 * layers + last + 2 * last);
    if (c.sequence_parallel) {
      want[{"all_reduce", "tp"}] += 1;
      want[{"all_gather", "tp"}] = m * (first + 4 * layers + last);
    }
  }
  if (c.tp * c.pp > 1) want[{"all_reduce", "model_parallel"}] = 1;  // the global norm
  if (c.pp > 1) {
    const auto [sends, recvs] = PointToPoint(c.pp, c.micro_batches, g.pp_rank());
    want[{"send", "pp"}] = sends;
    want[{"recv", "pp"}] = recvs;
    want[{"broadcast", "pp"}] = 1;          // the loss, from the last stage
    want[{"all_reduce", "embedding"}] = 1;  // the tied word embedding's gradient
  }
  if (c.dp > 1) {
    // The buckets (Gloo has no reduce-scatter: the distributed optimizer all-reduces too), the
    // global norm over DP with the distributed optimizer, the two DP means of the loss.
    want[{"all_reduce", "dp"}] = buckets + (c.distributed_optimizer ? 1 : 0) + 2;
    if (c.distributed_optimizer) want[{"all_gather", "dp"}] = buckets;
  }
  return want;
}

class TrainerCommTest : public ::testing::TestWithParam<Config> {};

TEST_P(TrainerCommTest, AStepRecordsEveryCollectiveItRuns) {
  if (!parallel::HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  at::set_num_threads(1);
  const Config c = GetParam();
  const mt::v1::JobSpec spec = Spec(c);
  auto layout = mt::layout::JobLayout(spec, c.tp * c.pp * c.dp);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const auto errors = parallel::testing::RunRanks(
      *layout, [&](int rank, std::shared_ptr<parallel::ProcessGroups> groups) {
        auto collectives = parallel::MakeCollectives(groups, 1 << 20);
        TrainerOptions o;
        o.log_progress = false;
        o.attention_backend = "math";
        o.sync_every_step = true;
        o.groups = groups;
        o.collectives = collectives.get();
        auto t = Trainer::Create(spec, o, Source(), nullptr);
        ASSERT_TRUE(t.ok()) << t.status();
        Trainer& trainer = **t;
        EXPECT_TRUE(trainer.TakeCommunication().empty()) << "building runs no collective";
        const int64_t buckets = static_cast<int64_t>(trainer.optimizer().buckets().size());
        if (c.dp > 1) {
          EXPECT_GE(buckets, 2) << "the test means to count several buckets";
        }
        const Counts want = Expected(c, *groups, buckets);
        for (int step = 1; step <= kSteps; ++step) {
          auto m = trainer.Step();
          ASSERT_TRUE(m.ok()) << m.status();
          const std::vector<parallel::CommTime> got = trainer.TakeCommunication();
          Counts calls;
          double sum = 0.0;
          for (const parallel::CommTime& ct : got) {
            calls[{ct.collective, ct.group}] = ct.calls;
            EXPECT_GT(ct.seconds, 0.0) << ct.collective << " " << ct.group;
            EXPECT_LT(ct.seconds, m->seconds) << ct.collective << " " << ct.group;
            sum += ct.seconds;
          }
          EXPECT_EQ(calls, want) << "rank " << rank << " step " << step;
          // No two groups have ops in flight together here, and ops in flight together on one
          // group (the DP buckets, a send and a receive) count their union once.
          EXPECT_LT(sum, m->seconds) << "rank " << rank << " step " << step;
        }
      });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TrainerCommTest,
    ::testing::Values(Config{"tp2", 2, 1, 1}, Config{"tp2_sp", 2, 1, 1, 2, true},
                      Config{"pp2", 1, 2, 1, 4}, Config{"dp2", 1, 1, 2},
                      Config{"dp2_overlap", 1, 1, 2, 2, false, false, true},
                      Config{"dp2_distributed_optimizer", 1, 1, 2, 2, false, true}),
    [](const ::testing::TestParamInfo<Config>& info) { return info.param.name; });

}  // namespace
}  // namespace mt::engine
