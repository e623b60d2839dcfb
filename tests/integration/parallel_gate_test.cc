// The correctness gate of Megatron parallelism (issue #6): a tiny fp32 GPT with the same seed
// and the same global batch trained for 20 steps as a job through the real coordinator and
// worker daemons (CPU, Gloo, one process per rank) under every layout of kLayouts gives, step
// by step, the loss of the (TP, PP, DP) = (1, 1, 1) run within 1e-5 relative. Two layouts run
// with the overlapped DP reduction (and parameter gather with the distributed optimizer).
//
// The losses come from the ranks' own progress lines ("step i/20 | loss X", X printed with 7
// significant digits), read through `mtctl logs` for the first rank (first pipeline stage) and
// the rank that reports progress to the coordinator (first rank of the last stage): both must
// show the whole job's loss. The jobs run side by side on 8 worker daemons.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/job_fixture.h"
#include "tests/testutil/step_losses.h"

namespace mt {
namespace {

using testutil::CommandResult;
using testutil::StepLosses;

constexpr int kSteps = 20;
constexpr double kRelTol = 1e-5;
constexpr int kWorkers = 8;

// One layout of the gate. Add a row to add a layout.
struct GateLayout {
  const char* name;
  int tp, pp, dp;
  int layers_per_virtual_stage = 0;  // > 0: interleaved schedule
  bool sequence_parallel = false;
  bool distributed_optimizer = false;
  bool overlap_p2p_comm = false;
  // --overlap-grad-reduce, and --overlap-param-gather with the distributed optimizer.
  bool overlap = false;
};

// The reference first, then every layout of the issue.
const GateLayout kLayouts[] = {
    {"ref", 1, 1, 1},
    {"tp2", 2, 1, 1},
    {"tp2sp", 2, 1, 1, 0, /*sequence_parallel=*/true},
    {"tp2pp2", 2, 2, 1},
    {"tp2dp2", 2, 1, 2},
    {"tp2pp2dp2", 2, 2, 2},
    {"pp2", 1, 2, 1},
    {"dp2", 1, 1, 2},
    {"pp2dp2", 1, 2, 2, 0, false, false, /*overlap_p2p_comm=*/true, /*overlap=*/true},
    {"pp4v2", 1, 4, 1, /*layers_per_virtual_stage=*/1},
    {"dp4distopt", 1, 1, 4, 0, false, /*distributed_optimizer=*/true, false, /*overlap=*/true},
};

// 8 layers (so that 4 stages of 2 chunks each hold a layer), hidden 32, 4 heads, seq 16; 16
// samples per step in micro-batches of 2 (8 per pipeline at dp 1, a multiple of 4 stages).
// Dropout 0; clipping at 1.0 is active in the first steps. The vocabulary (GPT-2's 50257) is
// padded to a multiple of make_vocab_size_divisible_by * tp (Megatron's rule, the padded
// entries taking part in the softmax): 256 / tp keeps it 50432 under every layout, so that
// every layout trains the same model.
std::string JobYaml(const GateLayout& l, const std::string& data_prefix) {
  return absl::StrCat(
      "name: gate-", l.name, "\n",
      "model: {num_layers: 8, hidden_size: 32, num_attention_heads: 4, seq_length: 16,\n"
      "        hidden_dropout: 0.0, attention_dropout: 0.0, make_vocab_size_divisible_by: ",
      256 / l.tp, "}\n", "parallel: {tp: ", l.tp, ", pp: ", l.pp, ", dp: ", l.dp,
      ", num_layers_per_virtual_pipeline_stage: ", l.layers_per_virtual_stage,
      ", sequence_parallel: ", l.sequence_parallel ? "true" : "false",
      ", use_distributed_optimizer: ", l.distributed_optimizer ? "true" : "false",
      ", overlap_p2p_comm: ", l.overlap_p2p_comm ? "true" : "false",
      ", overlap_grad_reduce: ", l.overlap ? "true" : "false",
      ", overlap_param_gather: ", l.overlap && l.distributed_optimizer ? "true" : "false",
      // Overlap: buckets of 20000 elements (the layers' ~100K parameters in several).
      l.overlap ? ", ddp_bucket_size: 20000" : "", "}\n",
      "training: {micro_batch_size: 2, global_batch_size: 16, train_iters: ", kSteps,
      ", lr: 3.0e-3, lr_warmup_iters: 2, clip_grad: 1.0, seed: 7}\n",
      "data:\n  data_path: ", data_prefix, "\n  split: \"90,10,0\"\n",
      "  tokenizer: {vocab_file: /unused/vocab.json, merge_file: /unused/merges.txt}\n",
      "evaluation: {eval_interval: 0}\n", "logging: {log_interval: 1}\n");
}

class ParallelGateTest : public testutil::JobFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(JobFixture::SetUp());
    StartWorkers(kWorkers, {}, /*node_per_worker=*/false, absl::Seconds(60));
  }
};

TEST_F(ParallelGateTest, EveryLayoutGivesTheLossesOfOneRankStepByStep) {
  std::vector<std::string> ids;
  for (const GateLayout& l : kLayouts) {
    ASSERT_LE(l.tp * l.pp * l.dp, kWorkers) << l.name;
    ids.push_back(Submit(JobYaml(l, data_), absl::StrCat(l.name, ".yaml")));
    ASSERT_FALSE(ids.back().empty()) << l.name;
  }
  std::map<int, double> reference;
  for (size_t i = 0; i < ids.size(); ++i) {
    const GateLayout& l = kLayouts[i];
    SCOPED_TRACE(absl::StrCat("layout ", l.name, " (tp=", l.tp, " pp=", l.pp, " dp=", l.dp, ")"));
    ASSERT_TRUE(cluster_.WaitForState(ids[i], mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(8)))
        << EventText(ids[i]);
    auto job = cluster_.GetJob(ids[i]);
    ASSERT_TRUE(job.ok());
    EXPECT_EQ(job->layout().tensor_model_parallel_size(), l.tp);
    EXPECT_EQ(job->layout().pipeline_model_parallel_size(), l.pp);
    EXPECT_EQ(job->layout().data_parallel_size(), l.dp);
    EXPECT_EQ(job->progress().step(), kSteps);
    // Rank 0 (first stage) and the reporting rank (first rank of the last stage).
    const int reporter = (l.pp - 1) * l.tp * l.dp;
    for (int rank : {0, reporter}) {
      CommandResult logs = cluster_.Mtctl({"logs", ids[i], absl::StrCat(rank)});
      ASSERT_EQ(logs.exit_code, 0) << logs.err;
      const std::map<int, double> losses = StepLosses(logs.out);
      ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps)) << "rank " << rank << ":\n" << logs.out;
      if (i == 0) {
        reference = losses;
        continue;
      }
      for (const auto& [step, loss] : losses) {
        ASSERT_TRUE(reference.count(step));
        EXPECT_NEAR(loss, reference[step], kRelTol * reference[step])
            << "rank " << rank << " step " << step;
      }
    }
    // The coordinator shows the reporting rank's last loss.
    EXPECT_NEAR(job->progress().loss(), reference[kSteps], kRelTol * reference[kSteps]);
  }
  // The run learns: a sanity check that the reference is a real training run.
  ASSERT_EQ(reference.size(), static_cast<size_t>(kSteps));
  EXPECT_LT(reference[kSteps], reference[1]);
}

}  // namespace
}  // namespace mt
