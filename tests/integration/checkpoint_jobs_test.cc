// Checkpoints through the whole stack: real coordinator, worker daemons and trainer processes
// (CPU, Gloo), a tiny GPT on a small repetitive dataset.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/files.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/cluster.h"

namespace mt {
namespace {

using ::testing::IsEmpty;
using testutil::Cluster;
using testutil::CommandResult;

const std::string kBin = std::string(MT_BINARY_DIR) + "/bin";

std::string JobYaml(const std::string& name, const std::string& data, int iters,
                    const std::string& checkpoint) {
  return absl::StrCat(
      "name: ", name, "\n",
      "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16,\n"
      "        hidden_dropout: 0.1, attention_dropout: 0.1}\n"
      "parallel: {tp: 1, pp: 1, dp: 2}\n",
      "training: {micro_batch_size: 2, global_batch_size: 8, train_iters: ", iters,
      ", lr: 3.0e-3, lr_warmup_iters: 2, seed: 7}\n", "data:\n  data_path: ", data,
      "\n  split: \"90,10,0\"\n",
      "  tokenizer: {vocab_file: /unused/vocab.json, merge_file: /unused/merges.txt}\n",
      "evaluation: {eval_interval: 0}\n", "logging: {log_interval: 1}\n",
      "checkpoint: ", checkpoint, "\n");
}

class CheckpointJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Log("coordinator.log");
    data_ = testutil::WriteRepetitiveDataset(cluster_.dir(), 64, 200);
    ASSERT_FALSE(data_.empty());
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(cluster_.StartWorker(absl::StrCat("w", i)).ok());
    ASSERT_TRUE(cluster_.WaitForIdleWorkers(2, absl::Seconds(30)));
  }

  std::string Submit(const std::string& yaml, const std::string& file) {
    const std::string path = cluster_.dir() + "/" + file;
    EXPECT_TRUE(WriteFileAtomically(path, yaml).ok());
    CommandResult r = cluster_.Mtctl({"submit", path});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return std::string(absl::StripAsciiWhitespace(r.out));
  }

  double FinalLoss(const std::string& id) {
    auto job = cluster_.GetJob(id);
    return job.ok() ? job->progress().loss() : std::nan("");
  }

  Cluster cluster_{kBin};
  std::string data_;
};

// A job saving every 4 steps over two DP ranks; a second job resumes from its step-8
// checkpoint and ends with exactly the loss of the first job's step 12.
TEST_F(CheckpointJobsTest, SavedJobResumesWithTheSameLosses) {
  const std::string save = cluster_.dir() + "/ckpt";
  const std::string a = Submit(
      JobYaml("straight", data_, 12, absl::StrCat("{save_dir: ", save, ", save_interval: 4}")),
      "a.yaml");
  ASSERT_TRUE(cluster_.WaitForState(a, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << cluster_.Log("w0.log");
  EXPECT_EQ(checkpoint::ListCheckpointSteps(save), (std::vector<int64_t>{4, 8, 12}));
  auto latest = checkpoint::ReadLatest(save);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, 12);
  auto choice = checkpoint::ChooseCheckpoint(save);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_THAT(choice->problems, IsEmpty());
  EXPECT_EQ(choice->manifest.files_size(), 1);  // DP rank 1 holds the same state
  EXPECT_EQ(choice->manifest.trainer().consumed_samples(), 96);
  const double straight = FinalLoss(a);

  const std::string b =
      Submit(JobYaml("resumed", data_, 12,
                     absl::StrCat("{load_dir: ", save, "/iter_0000008, save_dir: ", cluster_.dir(),
                                  "/ckpt2}")),
             "b.yaml");
  ASSERT_TRUE(cluster_.WaitForState(b, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << cluster_.Log("w1.log");
  EXPECT_EQ(FinalLoss(b), straight);  // bit for bit
  EXPECT_EQ(checkpoint::ListCheckpointSteps(cluster_.dir() + "/ckpt2"), (std::vector<int64_t>{12}));
}

}  // namespace
}  // namespace mt
