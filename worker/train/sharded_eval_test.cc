// The sharded evaluation's engine path (sharded_eval.h) on one rank against `mt-worker eval`
// on the same checkpoint and samples: a weights-only restore into the training engine and its
// evaluation give the local command's loss and token count, --all included; a split without
// validation data is refused naming --split. Built twice: mt_sharded_eval_test on the CPU
// (fp32: the same loss within 1e-6) and mt_sharded_eval_gpu_test on cuda:0 (label gpu; bf16
// on both sides, through different kernels: within 2e-2, bf16's tolerance in the engine's GPU
// tests; skips without CUDA). Several ranks: tests/integration/inference_jobs_test.cc.
#include "worker/train/sharded_eval.h"

#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec/inference.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/train/eval_command.h"
#include "worker/train/token_corpus_for_test.h"
#include "worker/train/train_command.h"

// Set by CMake per executable: the device, and a suite name of its own for CTest.
#ifndef MT_SHARDED_EVAL_DEVICE
#define MT_SHARDED_EVAL_DEVICE "cpu"
#define MT_SHARDED_EVAL_SUITE ShardedEvalTest
#endif

namespace mt::train {
namespace {

using ::testing::HasSubstr;

constexpr char kDevice[] = MT_SHARDED_EVAL_DEVICE;

bool OnCuda() { return std::string(kDevice).rfind("cuda", 0) == 0; }

// The loss in `mt-worker eval -o json` output (stdout captured), NaN when it failed.
double LocalLoss(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc = RunEvalCommand(args);
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 0) << err;
  const size_t at = out.find("\"loss\":");
  if (rc != 0 || at == std::string::npos) return NAN;
  return std::atof(out.c_str() + at + 7);
}

mt::v1::JobSpec EvalJob(const checkpoint::LoadChoice& load, const std::string& prefix,
                        const std::string& split, int64_t iters) {
  mt::v1::InferenceSpec inference;
  mt::v1::EvalTask* eval = inference.mutable_eval();
  eval->set_data_path(prefix);
  eval->set_split(split);
  if (iters > 0) {
    eval->set_eval_iters(iters);
  } else {
    eval->set_all(true);
  }
  auto job = spec::InferenceJobSpec(load.manifest, load.dir, inference, "eval", 0,
                                    mt::v1::DEVICE_KIND_AUTO);
  EXPECT_TRUE(job.ok()) << job.status().message();
  return job.ok() ? *job : mt::v1::JobSpec();
}

TEST(MT_SHARDED_EVAL_SUITE, OneRankGivesTheLocalCommandsLossOnTheSameSamples) {
  if (OnCuda() && !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = testutil::MakeTempDir("shardedeval");
  const std::string prefix = WriteTokenCorpus(dir);
  // The spec names tokenizer files; the corpus is already token ids, so they are never read.
  std::ofstream(dir + "/vocab.json") << "{}";
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\n";
  const std::string spec = dir + "/job.yaml";
  std::ofstream(spec) << absl::StrCat(
      "name: shardedeval\n"
      "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 16,\n"
      "        vocab_size: 128, hidden_dropout: 0.0, attention_dropout: 0.0}\n"
      "training: {micro_batch_size: 2, global_batch_size: 4, train_iters: 4, lr: 1.0e-3,\n"
      "           precision: ",
      OnCuda() ? "bf16" : "fp32",
      "}\n"
      "data: {data_path: ",
      prefix, ", split: \"80,20,0\",\n       tokenizer: {vocab_file: ", dir,
      "/vocab.json, merge_file: ", dir, "/merges.txt}}\n", "logging: {log_interval: 4}\n");
  const std::vector<std::string> train = {"--spec",      spec,       "--save",
                                          dir + "/ckpt", "--device", kDevice};
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int train_rc = RunTrainCommand(train);
  ::testing::internal::GetCapturedStdout();
  const std::string train_err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(train_rc, 0) << train_err;

  auto load = checkpoint::ChooseLoad(dir + "/ckpt");
  ASSERT_TRUE(load.ok()) << load.status().message();
  ASSERT_TRUE(load->has_value());
  ShardedEvalOptions options;
  options.trainer.device = OnCuda() ? "cuda:0" : "cpu";
  options.load.stage_device = OnCuda() ? "cuda:0" : "";
  const double tolerance = OnCuda() ? 2e-2 : 1e-6;

  const double local =
      LocalLoss({dir + "/ckpt", "--data-path", prefix, "--split", "80,20,0", "--eval-iters", "3",
                 "--device", options.trainer.device, "-o", "json"});
  absl::StatusOr<ShardedEvalRun> run =
      EvaluateSharded(EvalJob(**load, prefix, "80,20,0", 3), options);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_NEAR(run->metrics.loss, local, tolerance);
  EXPECT_GT(run->metrics.loss, 1.0);  // a trained but far from perfect model of 128 tokens
  EXPECT_EQ(run->metrics.batches, 3);
  EXPECT_EQ(run->tokens, 3 * 2 * 16);
  EXPECT_EQ(run->step, 4);
  EXPECT_EQ(run->micro_batch_size, 2);
  EXPECT_EQ(run->context_length, 16);
  EXPECT_TRUE(run->same_samples_as_training);

  // --all: every full micro-batch of the validation split, as the local command reads them.
  const double local_all = LocalLoss({dir + "/ckpt", "--data-path", prefix, "--split", "80,20,0",
                                      "--all", "--device", options.trainer.device, "-o", "json"});
  run = EvaluateSharded(EvalJob(**load, prefix, "80,20,0", 0), options);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_NEAR(run->metrics.loss, local_all, tolerance);
  EXPECT_GT(run->metrics.batches, 3);
  EXPECT_EQ(run->tokens, run->metrics.batches * 2 * 16);

  // No validation documents: refused naming the flag.
  run = EvaluateSharded(EvalJob(**load, prefix, "100,0,0", 3), options);
  ASSERT_FALSE(run.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(run.status())) << run.status();
  EXPECT_THAT(std::string(run.status().message()), HasSubstr("--split"));
}

}  // namespace
}  // namespace mt::train
