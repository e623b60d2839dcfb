// Many machines, for real, on one host (issue #15): network namespaces joined by a bridge
// (netns_rig.h), the coordinator on 10.77.0.1 with a token, mtctl on 10.77.0.2, two CPU
// worker daemons on each of 10.77.0.3 and 10.77.0.4 (--node node3/node4).
//   - a TP=2 (inside a node) x DP=2 (across nodes) job trains with the per-step losses of the
//     same job with one rank (the parallel gate's tiny fp32 model and its 1e-5 tolerance);
//   - its TP groups stay inside a node (from `mtctl describe -o json`);
//   - a worker killed with SIGKILL and started again with the same --node and state file
//     registers again under the same id.
// Needs root for `ip netns`; skips saying so where it cannot create namespaces.
#include <signal.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "mt/v1/job.pb.h"
#include "tests/multinode/netns_rig.h"
#include "tests/testutil/certs.h"
#include "tests/testutil/cluster.h"
#include "tests/testutil/job_fixture.h"
#include "tests/testutil/step_losses.h"
#include "tests/testutil/subprocess.h"

namespace mt {
namespace {

using testutil::CommandResult;
using testutil::NetnsRig;

constexpr int kCoordinatorNode = 0;
constexpr int kClientNode = 1;
constexpr int kFirstWorkerNode = 2;
constexpr int kWorkerNodes = 2;
constexpr int kWorkersPerNode = 2;
constexpr int kSteps = 12;
constexpr double kRelTol = 1e-5;

std::string JobYaml(const std::string& name, int tp, int dp, const std::string& data) {
  return absl::StrCat(
      "name: ", name, "\n",
      "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 16,\n"
      "        hidden_dropout: 0.0, attention_dropout: 0.0, make_vocab_size_divisible_by: ",
      256 / tp, "}\nparallel: {tp: ", tp, ", pp: 1, dp: ", dp, "}\n",
      "training: {micro_batch_size: 2, global_batch_size: 8, train_iters: ", kSteps,
      ", lr: 3.0e-3, lr_warmup_iters: 2, clip_grad: 1.0, seed: 7}\n", "data:\n  data_path: ", data,
      "\n  split: \"90,10,0\"\n",
      // Unused (the data is token ids), but under the coordinator's --allowed-root.
      "  tokenizer: {vocab_file: ", data, "-unused-vocab.json, merge_file: ", data,
      "-unused-merges.txt}\n", "evaluation: {eval_interval: 0}\nlogging: {log_interval: 1}\n");
}

class MultinodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<NetnsRig> rig = NetnsRig::Create(kFirstWorkerNode + kWorkerNodes);
    if (!rig.ok()) GTEST_SKIP() << rig.status().message();
    rig_ = std::make_unique<NetnsRig>(*std::move(rig));
    bin_ = testutil::BinDir();
    dir_ = testutil::MakeTempDir("multinode");
    token_file_ = dir_ + "/token";
    ASSERT_TRUE(testutil::RunCommand(
                    {"/bin/sh", "-c", "echo multinode-rig-secret-0123456789 > " + token_file_})
                    .ok());
    // TLS as an operator runs it off loopback (docs/security.md): tokens never cross the
    // bridge in clear text, and the ranks' rendezvous goes over TLS too.
    absl::StatusOr<testutil::TestCerts> certs =
        testutil::MakeTestCerts(dir_, {NetnsRig::Address(kCoordinatorNode)});
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = *std::move(certs);
    coordinator_address_ = NetnsRig::Address(kCoordinatorNode) + ":7070";
    ASSERT_TRUE(
        coordinator_
            .Start(rig_->In(kCoordinatorNode,
                            {bin_ + "/mt-coordinator", "--listen=" + coordinator_address_,
                             "--auth_token_file=" + token_file_, "--allowed_root=" + dir_,
                             "--tls_cert=" + certs_.server_cert, "--tls_key=" + certs_.server_key,
                             "--state_dir=" + dir_ + "/state", "--heartbeat_interval=200ms",
                             "--lost_after=2s", "--stop_grace_seconds=5", "--metrics_port=-1"}),
                   dir_ + "/coordinator.log")
            .ok());
    for (int n = 0; n < kWorkerNodes; ++n) {
      for (int w = 0; w < kWorkersPerNode; ++w) ASSERT_NO_FATAL_FAILURE(StartWorker(n, w));
    }
    ASSERT_TRUE(testutil::WaitFor([&] { return IdleWorkers() == kWorkerNodes * kWorkersPerNode; },
                                  absl::Seconds(60)))
        << Mtctl({"workers"}).out << Log("coordinator");
  }

  static std::string NodeName(int n) { return absl::StrCat("node", kFirstWorkerNode + n); }
  std::string WorkerName(int n, int w) { return absl::StrCat(NodeName(n), "-w", w); }

  void StartWorker(int n, int w) {
    const std::string name = WorkerName(n, w);
    auto& p = workers_[name];
    p = std::make_unique<testutil::Subprocess>();
    ASSERT_TRUE(p->Start(rig_->In(kFirstWorkerNode + n,
                                  {bin_ + "/mt-worker", "--coordinator=" + coordinator_address_,
                                   "--token_file=" + token_file_, "--tls_ca=" + certs_.ca,
                                   "--node=" + NodeName(n), "--gpu=-1", "--cpu_cores=1",
                                   "--metrics_port=-1", "--rank_port_range=29500-29600",
                                   "--state_file=" + dir_ + "/" + name + ".id",
                                   "--work_dir=" + dir_ + "/" + name}),
                         dir_ + "/" + name + ".log")
                    .ok());
  }

  CommandResult Mtctl(std::vector<std::string> args, absl::Duration timeout = absl::Seconds(60)) {
    args.insert(args.begin(), {bin_ + "/mtctl", "--coordinator=" + coordinator_address_,
                               "--token_file=" + token_file_, "--tls_ca=" + certs_.ca});
    absl::StatusOr<CommandResult> r = testutil::RunCommand(rig_->In(kClientNode, args), timeout);
    return r.ok() ? *r : CommandResult{-1, "", std::string(r.status().message())};
  }

  int IdleWorkers() {
    const CommandResult r = Mtctl({"workers"});
    int idle = 0;
    for (size_t at = r.out.find("IDLE"); at != std::string::npos; at = r.out.find("IDLE", at + 1))
      ++idle;
    return r.exit_code == 0 ? idle : -1;
  }

  absl::StatusOr<mt::v1::Job> Describe(const std::string& id) {
    const CommandResult r = Mtctl({"describe", id, "-o", "json"});
    if (r.exit_code != 0) return absl::UnavailableError(r.err);
    mt::v1::Job job;
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;
    if (!google::protobuf::util::JsonStringToMessage(r.out, &job, options).ok()) {
      return absl::DataLossError(r.out);
    }
    return job;
  }

  bool WaitForState(const std::string& id, const std::string& state, absl::Duration timeout) {
    return testutil::WaitFor(
        [&] {
          absl::StatusOr<mt::v1::Job> job = Describe(id);
          return job.ok() && mt::v1::JobState_Name(job->state()) == state;
        },
        timeout);
  }

  std::string Submit(const std::string& yaml, const std::string& file) {
    const std::string path = dir_ + "/" + file;
    EXPECT_TRUE(
        testutil::RunCommand({"/bin/sh", "-c", "cat > " + path + " <<'EOF'\n" + yaml + "EOF\n"})
            .ok());
    const CommandResult r = Mtctl({"submit", path, "-o", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    mt::v1::Job job;
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;
    if (!google::protobuf::util::JsonStringToMessage(r.out, &job, options).ok()) {
      const std::string out(r.out);
      return out.substr(0, out.find_first_of(" \n"));
    }
    return job.id();
  }

  std::string Log(const std::string& name) {
    absl::StatusOr<CommandResult> r =
        testutil::RunCommand({"/usr/bin/tail", "-n", "30", dir_ + "/" + name + ".log"});
    return r.ok() ? "\n--- " + name + ":\n" + r->out : "";
  }

  std::unique_ptr<NetnsRig> rig_;
  std::string bin_, dir_, token_file_, coordinator_address_;
  testutil::TestCerts certs_;
  testutil::Subprocess coordinator_;
  std::map<std::string, std::unique_ptr<testutil::Subprocess>> workers_;
};

TEST_F(MultinodeTest, TensorInsideANodeDataAcrossNodesTrainsLikeOneRank) {
  const absl::Time start = absl::Now();
  const std::string data = testutil::WriteRepetitiveDataset(dir_, 64, 200);
  const std::string ref = Submit(JobYaml("ref", 1, 1, data), "ref.yaml");
  ASSERT_FALSE(ref.empty());
  ASSERT_TRUE(WaitForState(ref, "JOB_STATE_SUCCEEDED", absl::Minutes(4)))
      << Mtctl({"describe", ref}).out;
  const std::string wide = Submit(JobYaml("tp2dp2", 2, 2, data), "tp2dp2.yaml");
  ASSERT_FALSE(wide.empty());
  ASSERT_TRUE(WaitForState(wide, "JOB_STATE_SUCCEEDED", absl::Minutes(4)))
      << Mtctl({"describe", wide}).out << Mtctl({"logs", wide}).out << Log("node2-w0");
  absl::StatusOr<mt::v1::Job> job = Describe(wide);
  ASSERT_TRUE(job.ok()) << job.status();
  // TP groups inside a node, DP across both nodes.
  std::map<int, std::set<std::string>> nodes_of_tp_group;
  std::set<std::string> nodes;
  for (const mt::v1::RankPlacement& p : job->placement()) {
    nodes_of_tp_group[p.coordinates().dp()].insert(p.node());
    nodes.insert(p.node());
  }
  ASSERT_EQ(nodes_of_tp_group.size(), 2u);
  for (const auto& [dp, in] : nodes_of_tp_group) EXPECT_EQ(in.size(), 1u) << "dp group " << dp;
  EXPECT_EQ(nodes, (std::set<std::string>{"node2", "node3"}));
  const std::map<int, double> want = testutil::StepLosses(Mtctl({"logs", ref}).out);
  const std::map<int, double> got = testutil::StepLosses(Mtctl({"logs", wide}).out);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [step, loss] : want) {
    EXPECT_NEAR(got.at(step), loss, kRelTol * std::abs(loss)) << "step " << step;
  }
  std::fprintf(stderr, "[multinode] two jobs over the rig in %s\n",
               absl::FormatDuration(absl::Now() - start).c_str());
}

TEST_F(MultinodeTest, AWorkerKilledAndStartedAgainOnItsNodeRegistersAgain) {
  const std::string name = WorkerName(1, 0);
  const std::string before = Mtctl({"workers"}).out;
  workers_[name]->Signal(SIGKILL);
  ASSERT_TRUE(workers_[name]->Wait(absl::Seconds(10)).ok());
  ASSERT_TRUE(testutil::WaitFor([&] { return IdleWorkers() == 3; }, absl::Seconds(20)))
      << Mtctl({"workers"}).out;
  ASSERT_NO_FATAL_FAILURE(StartWorker(1, 0));
  ASSERT_TRUE(testutil::WaitFor([&] { return IdleWorkers() == 4; }, absl::Seconds(30)))
      << Mtctl({"workers"}).out << Log(name);
  const CommandResult after = Mtctl({"workers"});
  EXPECT_THAT(after.out, ::testing::HasSubstr("node3"));
}

}  // namespace
}  // namespace mt
