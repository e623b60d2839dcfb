#include "worker/engine/train_command.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/metrics/event_file.h"

namespace mt::engine {
namespace {

using ::testing::HasSubstr;

std::string WriteSpec(const std::string& name, const std::string& yaml) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << yaml;
  return path;
}

constexpr char kTinyYaml[] = R"(name: tiny
model:
  num_layers: 2
  hidden_size: 32
  num_attention_heads: 4
  seq_length: 16
  vocab_size: 128
training:
  micro_batch_size: 2
  global_batch_size: 4
  train_iters: 50
  lr: 1.0e-3
  lr_warmup_iters: 1
  lr_decay_style: cosine
evaluation:
  eval_interval: 2
  eval_iters: 1
logging:
  log_interval: 1
)";

TEST(TrainCommandTest, TrainsOnSyntheticData) {
  const std::string spec = WriteSpec("tiny.yaml", kTinyYaml);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc =
      RunTrainCommand({"--spec", spec, "--synthetic-data", "--train-iters=3", "--device", "cpu"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 0) << err;
  EXPECT_THAT(out, HasSubstr("iterations=3 loss="));
  EXPECT_THAT(out, HasSubstr("valid_loss="));
  EXPECT_THAT(err, HasSubstr("step 3/3 | loss"));
  EXPECT_THAT(err, HasSubstr("validation at step 2"));
}

TEST(TrainCommandTest, TensorBoardDirGetsMegatronsScalars) {
  const std::string spec = WriteSpec("tiny_tb.yaml", kTinyYaml);
  std::string dir = ::testing::TempDir() + "/train_command_tb_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);  // a fresh directory: one run's file only
  ::testing::internal::CaptureStderr();
  const int rc = RunTrainCommand(
      {"--spec", spec, "--synthetic-data", "--train-iters=3", "--tensorboard-dir", dir});
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(rc, 0) << err;
  const std::vector<std::string> files = worker::metrics::ListEventFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  auto events = worker::metrics::ReadEventFile(files[0]);
  ASSERT_TRUE(events.ok()) << events.status();
  std::vector<int64_t> loss_steps;
  int validation = 0;
  for (const auto& e : *events) {
    for (const auto& v : e.summary().value()) {
      if (v.tag() == "lm loss") loss_steps.push_back(e.step());
      validation += v.tag() == "lm loss validation";
    }
  }
  EXPECT_THAT(loss_steps, ::testing::ElementsAre(1, 2, 3));
  EXPECT_EQ(validation, 2);  // after step 2 and after the last
}

TEST(TrainCommandTest, UsageAndSpecErrorsExitWithTwo) {
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunTrainCommand({}), 2);
  EXPECT_EQ(RunTrainCommand({"--spec"}), 2);
  EXPECT_EQ(RunTrainCommand({"--spec", "x.yaml", "--bogus"}), 2);
  EXPECT_EQ(RunTrainCommand({"--spec", "x.yaml", "--train-iters", "zero"}), 2);
  EXPECT_EQ(RunTrainCommand({"--spec", ::testing::TempDir() + "/missing.yaml"}), 2);
  const std::string bad = WriteSpec("bad.yaml", "model: {num_layers: 2, hidden_sise: 3}\n");
  EXPECT_EQ(RunTrainCommand({"--spec", bad, "--synthetic-data"}), 2);
  // No data section and no --synthetic-data: a spec (or data-setup) error.
  const std::string spec = WriteSpec("tiny2.yaml", kTinyYaml);
  EXPECT_EQ(RunTrainCommand({"--spec", spec}), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("--spec is required"));
  EXPECT_THAT(err, HasSubstr("unknown argument \"--bogus\""));
  EXPECT_THAT(err, HasSubstr("hidden_sise"));
}

TEST(TrainCommandTest, Help) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunTrainCommand({"--help"}), 0);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("usage: mt-worker train"));
}

}  // namespace
}  // namespace mt::engine
