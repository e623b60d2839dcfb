// `mt-worker eval` and `mt-worker generate` (mt-train eval|generate) on checkpoints that
// `mt-worker train` saved: the eval command reports the training loop's own validation loss on
// the same samples; generate answers in JSON and refuses bad input by its flag.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"
#include "worker/train/eval_command.h"
#include "worker/train/generate_command.h"
#include "worker/train/token_corpus_for_test.h"
#include "worker/train/train_command.h"

namespace mt::train {
namespace {

using ::testing::HasSubstr;

struct Captured {
  int rc = 0;
  std::string out;
  std::string err;
};

template <typename F>
Captured Capture(F run) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  Captured c;
  c.rc = run();
  c.out = ::testing::internal::GetCapturedStdout();
  c.err = ::testing::internal::GetCapturedStderr();
  return c;
}

// The number after `key` in `text` (key=VALUE or "key":VALUE).
double NumberAfter(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  EXPECT_NE(at, std::string::npos) << key << " in " << text;
  return at == std::string::npos ? NAN : std::atof(text.c_str() + at + key.size());
}

std::string WriteSpec(const std::string& dir, const std::string& body) {
  const std::string path = dir + "/job.yaml";
  std::ofstream(path) << body;
  return path;
}

TEST(EvalCommandTest, ReportsTheTrainingLoopsValidationLossOnTheSameSamples) {
  const std::string dir = testutil::MakeTempDir("evalcmd");
  const std::string prefix = WriteTokenCorpus(dir);
  // The spec names tokenizer files; the corpus is already token ids, so they are never read.
  std::ofstream(dir + "/vocab.json") << "{}";
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\n";
  const std::string spec =
      WriteSpec(dir, absl::StrCat(R"(name: evalcmd
model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 16, vocab_size: 128,
        hidden_dropout: 0.0, attention_dropout: 0.0}
training: {micro_batch_size: 2, global_batch_size: 4, train_iters: 4, lr: 1.0e-3}
data: {data_path: )",
                                  prefix, R"(, split: "80,20,0",
       tokenizer: {vocab_file: )",
                                  dir, "/vocab.json, merge_file: ", dir, R"(/merges.txt}}
evaluation: {eval_interval: 4, eval_iters: 3}
logging: {log_interval: 4}
)"));
  const Captured train = Capture([&] {
    return RunTrainCommand({"--spec", spec, "--save", dir + "/ckpt", "--attention", "math"});
  });
  ASSERT_EQ(train.rc, 0) << train.err;
  const double valid_loss = NumberAfter(train.out, "valid_loss=");

  // The first evaluation took eval_iters (3) global batches of 4: 6 micro-batches of 2.
  const Captured eval = Capture([&] {
    return RunEvalCommand({dir + "/ckpt", "--data-path", prefix, "--split", "80,20,0",
                           "--eval-iters", "6", "--attention", "math", "-o", "json"});
  });
  ASSERT_EQ(eval.rc, 0) << eval.err;
  EXPECT_NEAR(NumberAfter(eval.out, "\"loss\":"), valid_loss, 2e-6);
  EXPECT_THAT(eval.out, HasSubstr("\"same_samples_as_training\":true"));
  EXPECT_EQ(NumberAfter(eval.out, "\"tokens\":"), 6 * 2 * 16);
  EXPECT_EQ(NumberAfter(eval.out, "\"step\":"), 4);

  // --quantize int8: the same batches through int8 linear weights; a loss that moved, not far.
  const Captured int8 = Capture([&] {
    return RunEvalCommand({dir + "/ckpt", "--data-path", prefix, "--split", "80,20,0",
                           "--eval-iters", "6", "--attention", "math", "--quantize", "int8", "-o",
                           "json"});
  });
  ASSERT_EQ(int8.rc, 0) << int8.err;
  const double int8_loss = NumberAfter(int8.out, "\"loss\":");
  EXPECT_NE(int8_loss, NumberAfter(eval.out, "\"loss\":"));
  EXPECT_NEAR(int8_loss, valid_loss, 0.05);
  EXPECT_EQ(NumberAfter(int8.out, "\"tokens\":"), 6 * 2 * 16);

  // --all: every sample of the validation split once, in micro-batches of 3.
  const Captured all = Capture([&] {
    return RunEvalCommand({dir + "/ckpt", "--data-path", prefix, "--split", "80,20,0", "--all",
                           "--micro-batch-size", "3"});
  });
  ASSERT_EQ(all.rc, 0) << all.err;
  EXPECT_GT(NumberAfter(all.out, "micro_batches="), 6);
  EXPECT_NEAR(NumberAfter(all.out, "loss="), valid_loss, 0.5);

  // Bad input: each error names what to fix.
  Captured bad = Capture([&] { return RunEvalCommand({dir + "/none", "--data-path", prefix}); });
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr(dir + "/none\": no such file"));
  bad = Capture([&] { return RunEvalCommand({dir + "/ckpt"}); });
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("--data-path PREFIX is required"));
  bad = Capture([&] {
    return RunEvalCommand({dir + "/ckpt", "--data-path", prefix, "--context-length", "17"});
  });
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("--context-length \"17\": want an integer in [2, 16]"));
  bad = Capture([&] {
    return RunEvalCommand({dir + "/ckpt", "--data-path", prefix, "--all", "--eval-iters", "2"});
  });
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("not both"));
  bad = Capture([&] {
    return RunEvalCommand({dir + "/ckpt", "--data-path", prefix, "--quantize", "int4"});
  });
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("--quantize \"int4\": want none or int8"));
}

// A data asset of deploy/setup.sh ($MT_ASSET_DIR, else the build's).
std::string Asset(const std::string& name) {
  const char* assets = std::getenv("MT_ASSET_DIR");
  return absl::StrCat(assets != nullptr ? assets : MT_ASSET_DIR, "/", name);
}

// Trains a tiny GPT for one step over GPT-2's vocabulary and saves it to DIR/ckpt; false where
// the BPE files are missing (the caller skips).
bool SaveTinyCheckpoint(const std::string& dir) {
  const std::string vocab = Asset("gpt2-vocab.json");
  const std::string merges = Asset("gpt2-merges.txt");
  if (!std::ifstream(vocab).good() || !std::ifstream(merges).good()) return false;
  const std::string spec = WriteSpec(dir, absl::StrCat(R"(name: gencmd
model: {num_layers: 1, hidden_size: 16, num_attention_heads: 2, seq_length: 16}
training: {micro_batch_size: 1, global_batch_size: 1, train_iters: 1, lr: 1.0e-3}
data: {tokenizer: {vocab_file: )",
                                                       vocab, ", merge_file: ", merges, R"(}}
evaluation: {eval_interval: 0, eval_iters: 0}
)"));
  const Captured train = Capture([&] {
    return RunTrainCommand({"--spec", spec, "--synthetic-data", "--save", dir + "/ckpt"});
  });
  EXPECT_EQ(train.rc, 0) << train.err;
  return true;
}

TEST(GenerateCommandTest, GeneratesFromASavedCheckpoint) {
  const std::string dir = testutil::MakeTempDir("gencmd");
  if (!SaveTinyCheckpoint(dir)) GTEST_SKIP() << "no GPT-2 BPE files (deploy/setup.sh)";
  ASSERT_FALSE(HasFailure()) << "the tiny checkpoint was not saved";
  const std::vector<std::string> greedy = {
      dir + "/ckpt", "--prompt", "Call me Ishmael.", "--temperature", "0", "--max-new-tokens", "5",
      "-o",          "json"};
  const Captured first = Capture([&] { return RunGenerateCommand(greedy); });
  ASSERT_EQ(first.rc, 0) << first.err;
  auto tokenizer =
      tokenizer::Gpt2BpeTokenizer::Create(Asset("gpt2-vocab.json"), Asset("gpt2-merges.txt"));
  ASSERT_TRUE(tokenizer.ok());
  EXPECT_EQ(NumberAfter(first.out, "\"prompt_tokens\":"),
            (*tokenizer)->Encode("Call me Ishmael.").size());
  EXPECT_THAT(first.out, HasSubstr("\"tokens\":5,\"finish_reason\":\"length\""));
  const Captured again = Capture([&] { return RunGenerateCommand(greedy); });
  EXPECT_EQ(again.out, first.out.substr(0, first.out.find("\"time_to_first")) +
                           again.out.substr(again.out.find("\"time_to_first")));
  // --no-cuda-graph: the eager decode step (on the CPU there is no other), the same tokens.
  std::vector<std::string> eager = greedy;
  eager.push_back("--no-cuda-graph");
  const Captured no_graph = Capture([&] { return RunGenerateCommand(eager); });
  ASSERT_EQ(no_graph.rc, 0) << no_graph.err;
  EXPECT_EQ(no_graph.out.substr(0, no_graph.out.find("\"time_to_first")),
            first.out.substr(0, first.out.find("\"time_to_first")));
  eager.back() = "--no-cuda-graphs";
  EXPECT_EQ(Capture([&] { return RunGenerateCommand(eager); }).rc, 2);

  // The prompt fills the 16 positions; bad sampling values; no such checkpoint.
  Captured bad = Capture([&] {
    return RunGenerateCommand({dir + "/ckpt", "--prompt", std::string(200, 'x') + " y z"});
  });
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("--prompt: "));
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--temperature", "-1"}, {"--top-p", "0"}, {"--top-p", "1.5"}, {"--top-k", "-3"}}) {
    bad = Capture([&] {
      return RunGenerateCommand({dir + "/ckpt", "--prompt", "a", flag, value});
    });
    EXPECT_EQ(bad.rc, 2) << flag;
    EXPECT_THAT(bad.err, HasSubstr(flag + " ")) << flag;
  }
  bad = Capture([&] { return RunGenerateCommand({dir + "/missing", "--prompt", "a"}); });
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr(dir + "/missing\": no such file"));
}

// Where stdout and stderr are one file (deploy/demo.sh's log, `2>&1 | tee`), the streamed text
// and its closing newline come before the timings, which start a line of their own.
TEST(GenerateCommandTest, TheTimingsFollowTheStreamedTextOnTheirOwnLine) {
  const std::string dir = testutil::MakeTempDir("gencmd_order");
  if (!SaveTinyCheckpoint(dir)) GTEST_SKIP() << "no GPT-2 BPE files (deploy/setup.sh)";
  ASSERT_FALSE(HasFailure()) << "the tiny checkpoint was not saved";
  const std::string log = dir + "/both.log";
  std::fflush(stdout);
  const int saved_out = ::dup(STDOUT_FILENO), saved_err = ::dup(STDERR_FILENO);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ::dup2(fd, STDOUT_FILENO);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
  const int rc = RunGenerateCommand({dir + "/ckpt", "--prompt", "Call me Ishmael.", "--temperature",
                                     "0", "--max-new-tokens", "5"});
  std::fflush(stdout);
  ::dup2(saved_out, STDOUT_FILENO);
  ::dup2(saved_err, STDERR_FILENO);
  ::close(saved_out);
  ::close(saved_err);
  ASSERT_EQ(rc, 0);
  std::ifstream in(log);
  const std::string both((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = both.find("mt-worker generate: 1 sample(s)");
  ASSERT_NE(at, std::string::npos) << both;
  ASSERT_GT(at, 0u) << both;
  EXPECT_EQ(both[at - 1], '\n') << both;
  EXPECT_EQ(both.find('\n', at), both.size() - 1) << "nothing after the timings: " << both;
}

}  // namespace
}  // namespace mt::train
