// Many machines, for real, on one host (issue #15): network namespaces joined by a bridge
// (rig_cluster.h over netns_rig.h), the coordinator on 10.77.0.1 with a token, mtctl on 10.77.0.2,
// two CPU worker daemons on each of 10.77.0.3 and 10.77.0.4 (--node node2/node3).
//   - a TP=2 (inside a node) x DP=2 (across nodes) job and a TP=2 x PP=2 (pipeline stages on
//     different nodes) job train with the per-step losses of the same job with one rank (the
//     parallel gate's tiny fp32 model and its 1e-5 tolerance); TP groups stay inside a node
//     (from `mtctl describe -o json`);
//   - a node's link cut mid-job: the job is detected as broken (the cause names the node) and
//     held PENDING with the reason while its layout does not fit the nodes left; once the link
//     is back the job trains again from its last checkpoint and ends with the undisturbed
//     run's losses;
//   - three worker nodes, one of which dies for good under a TP=2 x DP=2 job: the job restarts
//     from its last checkpoint on the nodes left and ends with the undisturbed run's losses;
//   - a worker killed with SIGKILL and started again with the same --node and state file
//     registers again under the same id;
//   - the same rig over IPv6 only (fd00:77::/64): a DP=4-across-nodes job trains like one rank.
// Needs root for `ip netns`; skips saying so where it cannot create namespaces.
#include <signal.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mt/v1/job.pb.h"
#include "tests/testutil/cluster.h"
#include "tests/testutil/job_fixture.h"
#include "tests/testutil/netns_rig.h"
#include "tests/testutil/rig_cluster.h"
#include "tests/testutil/step_losses.h"
#include "tests/testutil/subprocess.h"

namespace mt {
namespace {

using testutil::CommandResult;
using testutil::NetnsRig;

constexpr int kFirstWorkerNode = testutil::RigCluster::kFirstWorkerNode;
constexpr int kWorkerNodes = 2;
constexpr int kWorkersPerNode = 2;
constexpr int kSteps = 12;
constexpr double kRelTol = 1e-5;

std::string JobYaml(const std::string& name, int tp, int pp, int dp, const std::string& data,
                    int steps = kSteps, const std::string& extra = "") {
  return absl::StrCat(
      "name: ", name, "\n",
      "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 16,\n"
      "        hidden_dropout: 0.0, attention_dropout: 0.0, make_vocab_size_divisible_by: ",
      256 / tp, "}\nparallel: {tp: ", tp, ", pp: ", pp, ", dp: ", dp, "}\n",
      "training: {micro_batch_size: 2, global_batch_size: 8, train_iters: ", steps,
      ", lr: 3.0e-3, lr_warmup_iters: 2, clip_grad: 1.0, seed: 7}\n", "data:\n  data_path: ", data,
      "\n  split: \"90,10,0\"\n",
      // Unused (the data is token ids), but under the coordinator's --allowed-root.
      "  tokenizer: {vocab_file: ", data, "-unused-vocab.json, merge_file: ", data,
      "-unused-merges.txt}\n", "evaluation: {eval_interval: 0}\nlogging: {log_interval: 1}\n",
      extra);
}

class MultinodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testutil::RigClusterOptions options;
    options.worker_nodes = worker_nodes_;
    options.ipv6 = ipv6_;
    absl::StatusOr<std::unique_ptr<testutil::RigCluster>> cluster =
        testutil::RigCluster::Create(testutil::BinDir(), options);
    if (absl::IsFailedPrecondition(cluster.status())) GTEST_SKIP() << cluster.status().message();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    rig_ = &cluster_->rig();
    dir_ = cluster_->dir();
    ASSERT_TRUE(cluster_->StartCoordinator().ok());
    for (int n = 0; n < worker_nodes_; ++n) {
      for (int w = 0; w < kWorkersPerNode; ++w) ASSERT_NO_FATAL_FAILURE(StartWorker(n, w));
    }
    ASSERT_TRUE(testutil::WaitFor([&] { return IdleWorkers() == worker_nodes_ * kWorkersPerNode; },
                                  absl::Seconds(60)))
        << Mtctl({"workers"}).out << Log("coordinator");
  }

  static std::string WorkerName(int n, int w) { return testutil::RigCluster::WorkerName(n, w); }
  void StartWorker(int n, int w) { ASSERT_TRUE(cluster_->StartWorker(n, w).ok()); }
  testutil::Subprocess* Worker(const std::string& name) { return cluster_->worker(name); }
  CommandResult Mtctl(std::vector<std::string> args, absl::Duration timeout = absl::Seconds(60)) {
    return cluster_->Mtctl(std::move(args), timeout);
  }
  int IdleWorkers() { return cluster_->IdleWorkers(); }
  absl::StatusOr<mt::v1::Job> Describe(const std::string& id) { return cluster_->Describe(id); }
  bool WaitForState(const std::string& id, const std::string& state, absl::Duration timeout) {
    return cluster_->WaitForState(id, state, timeout);
  }
  std::string Submit(const std::string& yaml, const std::string& file) {
    absl::StatusOr<std::string> id = cluster_->Submit(yaml, file);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or("");
  }
  std::string Log(const std::string& name, int lines = 30) { return cluster_->Log(name, lines); }

  // Submits `yaml`, waits for it to succeed and returns its per-step losses (from mtctl logs).
  std::map<int, double> RunToSuccess(const std::string& yaml, const std::string& file) {
    const std::string id = Submit(yaml, file);
    EXPECT_FALSE(id.empty());
    EXPECT_TRUE(WaitForState(id, "JOB_STATE_SUCCEEDED", absl::Minutes(4)))
        << Mtctl({"describe", id}).out << Mtctl({"logs", id}).out << Log("coordinator");
    return testutil::StepLosses(Mtctl({"logs", id}).out);
  }

  // Runs the one-rank reference of `data`, then `yaml` (a job of the same model on several
  // ranks); expects `yaml`'s per-step losses to be the reference's and returns its job as
  // described once it succeeded.
  absl::StatusOr<mt::v1::Job> RunLikeOneRank(const std::string& data, const std::string& yaml,
                                             const std::string& file) {
    const std::map<int, double> want = RunToSuccess(JobYaml("ref", 1, 1, 1, data), "ref.yaml");
    const std::string id = Submit(yaml, file);
    if (id.empty() || !WaitForState(id, "JOB_STATE_SUCCEEDED", absl::Minutes(4))) {
      return absl::DeadlineExceededError(Mtctl({"describe", id}).out + Mtctl({"logs", id}).out +
                                         Log("node2-w0"));
    }
    ExpectSameLosses(testutil::StepLosses(Mtctl({"logs", id}).out), want, kSteps);
    return Describe(id);
  }

  // The steps of `job`'s last attempt (its ranks' logs), which resumed after `resumed_at`, and
  // its final loss are those of the undisturbed run `want` (`steps` long).
  void ExpectResumedLike(const mt::v1::Job& job, const std::map<int, double>& want, int steps,
                         int64_t resumed_at) {
    const std::string logs = Mtctl({"logs", job.id()}).out;
    const std::map<int, double> got = testutil::StepLosses(logs);
    ASSERT_TRUE(got.count(steps)) << logs;
    EXPECT_GT(got.begin()->first, resumed_at);
    for (const auto& [step, loss] : got) {
      EXPECT_NEAR(loss, want.at(step), kRelTol * std::abs(want.at(step))) << "step " << step;
    }
    EXPECT_NEAR(job.progress().loss(), want.at(steps), kRelTol * want.at(steps));
  }

  // Waits until `id` runs an attempt after the first and reports a step past the checkpoint it
  // resumed from; returns that checkpoint's step and the step seen (both 0 on timeout).
  std::pair<int64_t, int64_t> WaitForTrainingAgain(const std::string& id, absl::Duration timeout) {
    std::pair<int64_t, int64_t> out{0, 0};
    testutil::WaitFor(
        [&] {
          absl::StatusOr<mt::v1::Job> job = Describe(id);
          if (!job.ok() || job->attempt() < 1 || job->state() != mt::v1::JOB_STATE_RUNNING ||
              job->progress().step() <= job->resume_step()) {
            return false;
          }
          out = {job->resume_step(), job->progress().step()};
          return true;
        },
        timeout);
    return out;
  }

  static void ExpectSameLosses(const std::map<int, double>& got, const std::map<int, double>& want,
                               int steps) {
    ASSERT_EQ(want.size(), static_cast<size_t>(steps));
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [step, loss] : want) {
      EXPECT_NEAR(got.at(step), loss, kRelTol * std::abs(loss)) << "step " << step;
    }
  }

  bool ipv6_ = false;
  int worker_nodes_ = kWorkerNodes;
  std::unique_ptr<testutil::RigCluster> cluster_;
  NetnsRig* rig_ = nullptr;
  std::string dir_;
};

// The nodes of `job`'s ranks, grouped by `group_of` (e.g. the DP replica or the PP stage).
template <typename GroupOf>
std::map<int, std::set<std::string>> NodesBy(const mt::v1::Job& job, GroupOf group_of) {
  std::map<int, std::set<std::string>> out;
  for (const mt::v1::RankPlacement& p : job.placement())
    out[group_of(p.coordinates())].insert(p.node());
  return out;
}

TEST_F(MultinodeTest, TensorInsideANodeDataAcrossNodesTrainsLikeOneRank) {
  const absl::Time start = absl::Now();
  const std::string data = testutil::WriteRepetitiveDataset(dir_, 64, 200);
  absl::StatusOr<mt::v1::Job> job =
      RunLikeOneRank(data, JobYaml("tp2dp2", 2, 1, 2, data), "tp2dp2.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  // TP groups inside a node, DP across both nodes.
  const auto nodes_of_tp_group = NodesBy(*job, [](const auto& c) { return c.dp(); });
  ASSERT_EQ(nodes_of_tp_group.size(), 2u);
  std::set<std::string> nodes;
  for (const auto& [dp, in] : nodes_of_tp_group) {
    EXPECT_EQ(in.size(), 1u) << "dp group " << dp;
    nodes.insert(in.begin(), in.end());
  }
  EXPECT_EQ(nodes, (std::set<std::string>{"node2", "node3"}));
  std::fprintf(stderr, "[multinode] two jobs over the rig in %s\n",
               absl::FormatDuration(absl::Now() - start).c_str());
}

// Megatron's multi-node layout: TP inside a node, the pipeline's stages on different nodes
// (activations and gradients cross the link between them).
TEST_F(MultinodeTest, PipelineStagesOnDifferentNodesTrainLikeOneRank) {
  const std::string data = testutil::WriteRepetitiveDataset(dir_, 64, 200);
  absl::StatusOr<mt::v1::Job> job =
      RunLikeOneRank(data, JobYaml("tp2pp2", 2, 2, 1, data), "tp2pp2.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  const auto nodes_of_stage = NodesBy(*job, [](const auto& c) { return c.pp(); });
  ASSERT_EQ(nodes_of_stage.size(), 2u);
  ASSERT_EQ(nodes_of_stage.at(0).size(), 1u);
  ASSERT_EQ(nodes_of_stage.at(1).size(), 1u);
  EXPECT_NE(*nodes_of_stage.at(0).begin(), *nodes_of_stage.at(1).begin());
}

// The cut-link scenario. A TP=2 x PP=2 job on both worker nodes saves every kSaveEvery steps;
// once its first checkpoint is in, node3's link to the bridge goes down. Its two workers stop
// heartbeating: after --lost_after (2 s) the job goes RESTARTING with a cause naming node3, its
// ranks on node2 are stopped (within --stop_grace_seconds), and it waits PENDING, saying
// why (4 workers needed, 2 live). With the link back, node3's workers register again, the job
// is placed again (the returning daemons' ranks of the old attempt are stopped first), resumes
// from its checkpoint and ends with the per-step losses of the undisturbed one-rank run.
TEST_F(MultinodeTest, ACutLinkIsDetectedNamingTheNodeAndTheJobResumesWhenItComesBack) {
  constexpr int kCutSteps = 24;
  constexpr int kSaveEvery = 4;
  constexpr int kCutNode = kFirstWorkerNode + 1;  // node3
  const std::string data = testutil::WriteRepetitiveDataset(dir_, 64, 200);
  const std::map<int, double> want =
      RunToSuccess(JobYaml("ref", 1, 1, 1, data, kCutSteps), "ref.yaml");
  const std::string ckpt = dir_ + "/ckpt";
  const std::string id =
      Submit(JobYaml("cut", 2, 2, 1, data, kCutSteps,
                     absl::StrCat("checkpoint: {save_dir: ", ckpt, ", save_interval: ", kSaveEvery,
                                  "}\nrestart: {max_restarts: 2}\n")),
             "cut.yaml");
  ASSERT_FALSE(id.empty());
  const std::string latest = ckpt + "/latest_checkpointed_iteration.txt";
  const absl::Time deadline = absl::Now() + absl::Minutes(3);
  while (::access(latest.c_str(), F_OK) != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(::access(latest.c_str(), F_OK), 0) << Mtctl({"describe", id}).out;
  ASSERT_TRUE(rig_->SetLink(kCutNode, false).ok());
  const absl::Time cut = absl::Now();

  // Detected: RESTARTING, the cause naming the node whose link is down.
  std::string cause;
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        absl::StatusOr<mt::v1::Job> job = Describe(id);
        if (!job.ok() || job->state() != mt::v1::JOB_STATE_RESTARTING) return false;
        cause = job->reason();
        return true;
      },
      absl::Seconds(20)))
      << Mtctl({"describe", id}).out << Log("coordinator");
  const absl::Duration detection = absl::Now() - cut;
  EXPECT_THAT(cause, ::testing::HasSubstr("on node node3"));
  EXPECT_THAT(cause, ::testing::HasSubstr("was lost (no heartbeat for 2s)"));
  // --lost_after (2 s) plus the coordinator's sweep (every heartbeat_interval / 2) and one
  // heartbeat interval of slack; mtctl's own polling adds its round trips.
  EXPECT_LT(detection, absl::Seconds(6)) << cause;

  // Held PENDING with the reason while the layout does not fit the node left.
  std::string waiting;
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        absl::StatusOr<mt::v1::Job> job = Describe(id);
        if (!job.ok() || job->state() != mt::v1::JOB_STATE_PENDING) return false;
        waiting = job->reason();
        return absl::StrContains(waiting, "waiting for 4 free workers (2 free)");
      },
      absl::Seconds(30)))
      << Mtctl({"describe", id}).out << Log("coordinator");
  const absl::Duration to_pending = absl::Now() - cut;

  // The link comes back: the job trains again (a step of the new attempt reported), from its
  // checkpoint, and finishes.
  ASSERT_TRUE(rig_->SetLink(kCutNode, true).ok());
  const absl::Time restored = absl::Now();
  const auto [resumed_at, first_step] = WaitForTrainingAgain(id, absl::Minutes(2));
  ASSERT_GT(first_step, 0) << Mtctl({"describe", id}).out << Log("coordinator") << Log("node3-w0");
  const absl::Duration training_again = absl::Now() - restored;
  EXPECT_GT(resumed_at, 0) << "restarted from scratch, not from the checkpoint";
  ASSERT_TRUE(WaitForState(id, "JOB_STATE_SUCCEEDED", absl::Minutes(3)))
      << Mtctl({"describe", id}).out << Mtctl({"logs", id}).out << Log("coordinator");
  absl::StatusOr<mt::v1::Job> done = Describe(id);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->attempt(), 1) << "one restart, for the cut link\n"
                                << Mtctl({"describe", id}).out << Log("coordinator", 200)
                                << Log("node3-w0", 80) << Log("node3-w1", 80);
  ExpectResumedLike(*done, want, kCutSteps, resumed_at);
  std::fprintf(stderr,
               "[multinode] cut link: detected in %s, PENDING (does not fit) %s after the cut; "
               "training again (step %lld reported, resumed from step %lld) %s after the link "
               "came back\n",
               absl::FormatDuration(detection).c_str(), absl::FormatDuration(to_pending).c_str(),
               static_cast<long long>(first_step), static_cast<long long>(resumed_at),
               absl::FormatDuration(training_again).c_str());
}

// Three worker nodes. A TP=2 x DP=2 job takes two of them; one of those dies for good (its link
// goes down and every process on it is killed, as when a machine loses power). The job is
// restarted from its last checkpoint on the nodes left (the survivor and the idle third one),
// keeps its TP groups inside a node, and ends with the undisturbed run's losses.
class MultinodeThreeNodesTest : public MultinodeTest {
 protected:
  MultinodeThreeNodesTest() { worker_nodes_ = 3; }
};

TEST_F(MultinodeThreeNodesTest, ANodeGoneForGoodRestartsTheJobOnTheNodesLeft) {
  constexpr int kJobSteps = 24;
  constexpr int kSaveEvery = 4;
  const std::string data = testutil::WriteRepetitiveDataset(dir_, 64, 200);
  const std::map<int, double> want =
      RunToSuccess(JobYaml("ref", 1, 1, 1, data, kJobSteps), "ref.yaml");
  const std::string ckpt = dir_ + "/ckpt";
  const std::string id =
      Submit(JobYaml("gone", 2, 1, 2, data, kJobSteps,
                     absl::StrCat("checkpoint: {save_dir: ", ckpt, ", save_interval: ", kSaveEvery,
                                  "}\nrestart: {max_restarts: 2}\n")),
             "gone.yaml");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitForState(id, "JOB_STATE_RUNNING", absl::Minutes(2)))
      << Mtctl({"describe", id}).out;
  absl::StatusOr<mt::v1::Job> first = Describe(id);
  ASSERT_TRUE(first.ok()) << first.status();
  std::set<std::string> used;
  for (const mt::v1::RankPlacement& p : first->placement()) used.insert(p.node());
  ASSERT_EQ(used.size(), 2u);
  const std::string victim = *used.rbegin();
  const int victim_index = std::stoi(victim.substr(4)) - kFirstWorkerNode;
  const std::string latest = ckpt + "/latest_checkpointed_iteration.txt";
  ASSERT_TRUE(
      testutil::WaitFor([&] { return ::access(latest.c_str(), F_OK) == 0; }, absl::Minutes(2)))
      << Mtctl({"describe", id}).out;

  // The machine dies: no RST, no goodbye; its workers (and, with them, their ranks) are gone.
  ASSERT_TRUE(rig_->SetLink(kFirstWorkerNode + victim_index, false).ok());
  const absl::Time died = absl::Now();
  for (int w = 0; w < kWorkersPerNode; ++w) Worker(WorkerName(victim_index, w))->Signal(SIGKILL);
  std::string cause;
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        absl::StatusOr<mt::v1::Job> job = Describe(id);
        if (!job.ok() || job->state() != mt::v1::JOB_STATE_RESTARTING) return false;
        cause = job->reason();
        return true;
      },
      absl::Seconds(20)))
      << Mtctl({"describe", id}).out << Log("coordinator");
  const absl::Duration detection = absl::Now() - died;
  EXPECT_THAT(cause, ::testing::HasSubstr("on node " + victim));

  const auto [resumed_at, first_step] = WaitForTrainingAgain(id, absl::Minutes(2));
  ASSERT_GT(first_step, 0) << Mtctl({"describe", id}).out << Log("coordinator");
  const absl::Duration training_again = absl::Now() - died;
  EXPECT_GT(resumed_at, 0) << "restarted from scratch, not from the checkpoint";
  ASSERT_TRUE(WaitForState(id, "JOB_STATE_SUCCEEDED", absl::Minutes(3)))
      << Mtctl({"describe", id}).out << Mtctl({"logs", id}).out << Log("coordinator");
  absl::StatusOr<mt::v1::Job> done = Describe(id);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->attempt(), 1);
  // On the nodes left, TP groups still inside a node.
  const auto nodes_of_tp_group = NodesBy(*done, [](const auto& c) { return c.dp(); });
  std::set<std::string> now_used;
  for (const auto& [dp, in] : nodes_of_tp_group) {
    EXPECT_EQ(in.size(), 1u) << "dp group " << dp;
    now_used.insert(in.begin(), in.end());
  }
  EXPECT_EQ(now_used.size(), 2u);
  EXPECT_EQ(now_used.count(victim), 0u);
  ExpectResumedLike(*done, want, kJobSteps, resumed_at);
  std::fprintf(stderr,
               "[multinode] node %s gone: detected in %s; training again on the nodes left "
               "(step %lld reported, resumed from step %lld) %s after it died\n",
               victim.c_str(), absl::FormatDuration(detection).c_str(),
               static_cast<long long>(first_step), static_cast<long long>(resumed_at),
               absl::FormatDuration(training_again).c_str());
}

TEST_F(MultinodeTest, AWorkerKilledAndStartedAgainOnItsNodeRegistersAgain) {
  const std::string name = WorkerName(1, 0);
  const std::string before = Mtctl({"workers"}).out;
  Worker(name)->Signal(SIGKILL);
  ASSERT_TRUE(Worker(name)->Wait(absl::Seconds(10)).ok());
  ASSERT_TRUE(testutil::WaitFor([&] { return IdleWorkers() == 3; }, absl::Seconds(20)))
      << Mtctl({"workers"}).out;
  ASSERT_NO_FATAL_FAILURE(StartWorker(1, 0));
  ASSERT_TRUE(testutil::WaitFor([&] { return IdleWorkers() == 4; }, absl::Seconds(30)))
      << Mtctl({"workers"}).out << Log(name);
  const CommandResult after = Mtctl({"workers"});
  EXPECT_THAT(after.out, ::testing::HasSubstr("node3"));
}

// The same rig over IPv6 only: the coordinator listens on [fd00:77::1]:7070, workers find their
// address from the route to it, ranks meet on fd00:77::/64.
class MultinodeIpv6Test : public MultinodeTest {
 protected:
  MultinodeIpv6Test() { ipv6_ = true; }
};

TEST_F(MultinodeIpv6Test, DataAcrossNodesOverIpv6TrainsLikeOneRank) {
  const std::string data = testutil::WriteRepetitiveDataset(dir_, 64, 200);
  absl::StatusOr<mt::v1::Job> job = RunLikeOneRank(data, JobYaml("dp4", 1, 1, 4, data), "dp4.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  std::set<std::string> nodes;
  for (const mt::v1::RankPlacement& p : job->placement()) nodes.insert(p.node());
  EXPECT_EQ(nodes, (std::set<std::string>{"node2", "node3"}));
  // The workers' ranks advertise their IPv6 address (the route to the coordinator).
  for (int n = 0; n < kWorkerNodes; ++n) {
    const absl::StatusOr<CommandResult> grep = testutil::RunCommand(
        {"/bin/grep", "-c", "advertised as " + NetnsRig::Address6(kFirstWorkerNode + n),
         dir_ + "/" + WorkerName(n, 0) + ".log"});
    ASSERT_TRUE(grep.ok());
    EXPECT_EQ(grep->exit_code, 0) << Log(WorkerName(n, 0));
  }
}

}  // namespace
}  // namespace mt
