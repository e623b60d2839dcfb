#include "tests/testutil/job_fixture.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/files.h"
#include "common/base/paths.h"

namespace mt::testutil {

std::string BinDir() {
  const char* env = std::getenv("MT_TEST_BIN_DIR");
  return env != nullptr && env[0] != '\0' ? env : std::string(MT_BINARY_DIR) + "/bin";
}

std::string TinyJob::Yaml() const {
  const std::string dropouts =
      dropout.empty()
          ? ""
          : absl::StrCat(",\n        hidden_dropout: ", dropout, ", attention_dropout: ", dropout);
  std::string yaml = absl::StrCat(
      "name: ", name, "\n",
      "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16", dropouts,
      "}\n", "parallel: {tp: 1, pp: 1, dp: ", dp, "}\n",
      "training: {micro_batch_size: 2, global_batch_size: ", global_batch_size,
      ", train_iters: ", train_iters, ", lr: 3.0e-3, lr_warmup_iters: 2, seed: 7}\n",
      "data:\n  data_path: ", data_path, "\n  split: \"", split, "\"\n",
      "  tokenizer: {vocab_file: ", tokenizer_dir, "/vocab.json, merge_file: ", tokenizer_dir,
      "/merges.txt}\n", "evaluation: ", evaluation, "\n", "logging: {log_interval: ", log_interval,
      "}\n");
  for (const std::string& section : sections) absl::StrAppend(&yaml, section, "\n");
  return yaml;
}

void JobFixture::SetUp() {
  ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Log("coordinator.log");
  data_ = WriteRepetitiveDataset(cluster_.dir(), 64, 200);
  ASSERT_FALSE(data_.empty());
}

void JobFixture::StartWorkers(int n, const std::vector<std::string>& flags, bool node_per_worker,
                              absl::Duration timeout) {
  for (int i = 0; i < n; ++i) {
    const std::string name = absl::StrCat("w", i);
    ASSERT_TRUE(cluster_.StartWorker(name, node_per_worker ? name : "node0", flags).ok());
  }
  ASSERT_TRUE(cluster_.WaitForIdleWorkers(n, timeout)) << cluster_.Log("coordinator.log");
}

std::string JobFixture::Submit(const std::string& yaml, const std::string& file,
                               const std::vector<std::string>& flags) {
  const std::string path = JoinPath(cluster_.dir(), file);
  EXPECT_TRUE(WriteFileAtomically(path, yaml).ok());
  std::vector<std::string> args = {"submit"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back(path);
  CommandResult r = cluster_.Mtctl(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return std::string(absl::StripAsciiWhitespace(r.out));
}

std::vector<mt::v1::JobEvent> JobFixture::Events(const std::string& id) {
  auto job = cluster_.GetJob(id, /*events=*/true);
  if (!job.ok()) return {};
  return {job->events().begin(), job->events().end()};
}

std::string JobFixture::EventText(const std::string& id) {
  std::string out;
  for (const auto& e : Events(id)) {
    absl::StrAppend(&out, e.attempt(), " ", mt::v1::JobState_Name(e.state()), ": ", e.reason(),
                    "\n");
  }
  return out;
}

std::string JobFixture::CoordinatorMetricsAddress() {
  const std::string out = cluster_.Mtctl({"info", "-o", "json"}).out;
  const std::string key = "\"metrics_url\": \"http://";
  const size_t at = out.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size();
  const size_t end = out.find("/metrics", from);
  return end == std::string::npos ? "" : out.substr(from, end - from);
}

std::vector<mt::v1::JobEvent> JobFixture::Transitions(const std::string& id) {
  std::vector<mt::v1::JobEvent> out;
  for (mt::v1::JobEvent& e : Events(id)) {
    // The job state machine has no self-edges: an event in the state before it is a note.
    if (out.empty() || out.back().state() != e.state()) out.push_back(std::move(e));
  }
  return out;
}

std::vector<mt::v1::JobState> JobFixture::States(const std::string& id) {
  std::vector<mt::v1::JobState> states;
  for (const mt::v1::JobEvent& e : Transitions(id)) states.push_back(e.state());
  return states;
}

}  // namespace mt::testutil
