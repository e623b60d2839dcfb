// A worker daemon that registers again while the coordinator has a rank placed on it (issue
// #15: a cut link that comes back). Over a real Store (SQLite) and WorkerRegistry and a fake
// clock: the answer to a registration can be lost (the daemon times out and registers again,
// naming no rank), an assignment can be lost with a broken stream, and the exit report of the
// previous attempt can arrive after the new attempt was placed on the same worker. In each case
// the rank placed there must still start there (or fail, once it is known to be gone), never be
// orphaned. Through real processes and network namespaces: tests/multinode/.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/spec/yaml_spec.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/jobs/job_manager_testing.h"
#include "coordinator/store/store.h"
#include "coordinator/workers/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class JobManagerReconnectTest : public JobManagerTestBase {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(SetUpManager("jm_reconnect", 3)); }

  static mt::v1::RegisterRequest Request(int node) { return CpuWorker(node); }

  // The daemon of `worker_id` registers again (with its credential and the session it holds,
  // as after a failed heartbeat), naming `running`.
  void ReRegister(const std::string& worker_id,
                  const std::vector<mt::v1::RunningRank>& running = {}) {
    mt::v1::RegisterRequest r = Request(0);
    r.set_worker_id(worker_id);
    r.set_worker_credential(issued_[worker_id].credential);
    r.set_session(issued_[worker_id].session);
    for (const auto& rr : running) *r.add_running() = rr;
    WorkerRegistry::Issued issued;
    auto w = jobs_->RegisterWorker(r, &issued);
    ASSERT_TRUE(w.ok()) << w.status();
    issued_[worker_id].session = issued.session;
  }

  std::string Submit() {
    auto parsed = spec::ParseYamlSpec(
        "name: r\n"
        "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16}\n"
        "parallel: {tp: 1, pp: 1, dp: 2}\n"
        "training: {micro_batch_size: 2, global_batch_size: 8, train_iters: 20, lr: 1.0e-3}\n"
        "data:\n  data_path: /data/x\n"
        "  tokenizer: {vocab_file: /v.json, merge_file: /m.txt}\n"
        "checkpoint: {save_dir: " +
        dir_ + "/ckpt}\n");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    auto r = jobs_->Submit(parsed->spec, "");
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job().id() : "";
  }

  mt::v1::Job Now(const std::string& id) {
    auto j = jobs_->Get(id, false);
    EXPECT_TRUE(j.ok());
    return j.ok() ? *j : mt::v1::Job();
  }

  // The assignments waiting for `worker_id` (taken).
  std::vector<mt::v1::Assignment> Assignments(const std::string& worker_id) {
    std::vector<mt::v1::Assignment> out;
    for (auto& c : jobs_->TakeCommands(worker_id, absl::ZeroDuration())) {
      if (c.has_assign()) out.push_back(c.assign());
    }
    return out;
  }

  void Report(const mt::v1::Job& job, int rank, mt::v1::RankPhase phase) {
    mt::v1::RankReport r;
    r.set_worker_id(job.placement(rank).worker_id());
    r.set_job_id(job.id());
    r.set_attempt(job.attempt());
    r.set_rank(rank);
    r.set_phase(phase);
    ASSERT_TRUE(jobs_->OnRankReport(r).ok());
  }

  absl::Status Exit(const mt::v1::Job& job, int rank, mt::v1::RankOutcome outcome) {
    mt::v1::RankExitReport r;
    r.set_worker_id(job.placement(rank).worker_id());
    r.set_job_id(job.id());
    r.set_attempt(job.attempt());
    r.set_rank(rank);
    r.set_outcome(outcome);
    r.set_message(outcome == mt::v1::RANK_OUTCOME_FAILED ? "exit code 1: boom" : "stopped");
    return jobs_->OnRankExit(r);
  }

  void HeartbeatAll() {
    for (const std::string& w : workers_) ASSERT_TRUE(registry_->Heartbeat(w).ok()) << w;
  }

  mt::v1::WorkerState StateOf(const std::string& worker_id, std::string* job_id = nullptr) {
    auto w = registry_->Get(worker_id);
    EXPECT_TRUE(w.ok());
    if (job_id != nullptr) *job_id = w.ok() ? w->job_id() : "";
    return w.ok() ? w->state() : mt::v1::WORKER_STATE_UNSPECIFIED;
  }
};

// The daemon's registration reached the coordinator but its answer did not; the job was placed
// on the worker meanwhile and the daemon registers again, naming no rank. The worker stays the
// rank's, the assignment still waiting for it is not doubled, and no orphan check fails it.
TEST_F(JobManagerReconnectTest, ARegistrationWhoseAnswerWasLostKeepsTheRankPlacedThere) {
  const std::string id = Submit();
  const mt::v1::Job job = Now(id);
  ASSERT_EQ(job.state(), mt::v1::JOB_STATE_SCHEDULED);
  const std::string a = job.placement(0).worker_id();
  ReRegister(a);
  std::string holds;
  EXPECT_EQ(StateOf(a, &holds), mt::v1::WORKER_STATE_BUSY);
  EXPECT_EQ(holds, id);
  const std::vector<mt::v1::Assignment> sent = Assignments(a);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].job_id(), id);
  EXPECT_EQ(sent[0].attempt(), 0);
  EXPECT_EQ(sent[0].coordinates().rank(), 0);
  jobs_->FailOrphans();
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_SCHEDULED) << Now(id).reason();
  // No other job is placed on it.
  EXPECT_EQ(registry_->Counts().idle, 1);
}

// A confined coordinator's roots go with every assignment, for the worker's own check right
// before the rank starts (worker/daemon/assignment_paths.h).
class JobManagerConfinedTest : public JobManagerReconnectTest {
 protected:
  void SetUp() override {
    JobManagerOptions o;
    o.allowed_roots = {"/data", "/srv/ck"};
    ASSERT_NO_FATAL_FAILURE(SetUpManager("jm_confined", 3, o));
  }
};

TEST_F(JobManagerConfinedTest, EveryAssignmentCarriesTheCoordinatorsRoots) {
  const mt::v1::Job job = Now(Submit());
  ASSERT_EQ(job.placement_size(), 2);
  for (int r = 0; r < job.placement_size(); ++r) {
    const std::vector<mt::v1::Assignment> sent = Assignments(job.placement(r).worker_id());
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_THAT(sent[0].allowed_roots(), ElementsAre("/data", "/srv/ck"));
  }
}

TEST_F(JobManagerReconnectTest, AnUnconfinedCoordinatorSendsNoRoots) {
  const mt::v1::Job job = Now(Submit());
  const std::vector<mt::v1::Assignment> sent = Assignments(job.placement(0).worker_id());
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].allowed_roots_size(), 0);
}

// The assignment went out on a stream that broke before the daemon read it: registering again
// without the rank brings the assignment again.
TEST_F(JobManagerReconnectTest, AnAssignmentLostWithItsStreamIsSentAgain) {
  const std::string id = Submit();
  const mt::v1::Job job = Now(id);
  const std::string a = job.placement(1).worker_id();
  ASSERT_EQ(Assignments(a).size(), 1u);  // written to a stream that then broke
  ReRegister(a);
  const std::vector<mt::v1::Assignment> again = Assignments(a);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].coordinates().rank(), 1);
  EXPECT_EQ(StateOf(a), mt::v1::WORKER_STATE_BUSY);
  // A daemon that names the rank running gets nothing new.
  mt::v1::RunningRank rr;
  rr.set_job_id(id);
  rr.set_attempt(0);
  rr.set_rank(1);
  ReRegister(a, {rr});
  EXPECT_TRUE(Assignments(a).empty());
  EXPECT_EQ(StateOf(a), mt::v1::WORKER_STATE_BUSY);
  // A rank of an attempt that is over is stopped at once (it may be blocked in a collective
  // with peers that are gone, deaf to SIGTERM); the one placed there, not named, comes again.
  rr.set_attempt(7);
  ReRegister(a, {rr});
  const std::vector<mt::v1::WorkerCommand> stop = jobs_->TakeCommands(a, absl::ZeroDuration());
  ASSERT_EQ(stop.size(), 2u);
  EXPECT_EQ(stop[1].assign().attempt(), 0);
  ASSERT_TRUE(stop[0].has_stop());
  EXPECT_EQ(stop[0].stop().attempt(), 7);
  EXPECT_EQ(stop[0].stop().grace_seconds(), 1);
  EXPECT_EQ(stop[0].stop().reason(), "the coordinator does not expect this rank here");
}

// A rank that had reported and is no longer on its worker ended there: its exit report follows
// the registration. It is waited for, for a grace, before the rank counts as lost.
TEST_F(JobManagerReconnectTest, ARankThatRanAndIsGoneFromItsWorkerIsLostOnlyAfterAGrace) {
  const std::string id = Submit();
  const mt::v1::Job job = Now(id);
  for (int r = 0; r < 2; ++r) Report(job, r, mt::v1::RANK_PHASE_TRAINING);
  ASSERT_EQ(Now(id).state(), mt::v1::JOB_STATE_RUNNING);
  const std::string a = job.placement(0).worker_id();
  Assignments(a);
  ReRegister(a);
  EXPECT_TRUE(Assignments(a).empty()) << "a rank that ran is not started again";
  jobs_->FailOrphans();
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_RUNNING) << Now(id).reason();
  clock_.Advance(absl::Seconds(9));
  HeartbeatAll();
  jobs_->FailOrphans();
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_RUNNING) << Now(id).reason();
  clock_.Advance(absl::Seconds(2));
  HeartbeatAll();
  jobs_->FailOrphans();
  const mt::v1::Job restarting = Now(id);
  EXPECT_EQ(restarting.state(), mt::v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(restarting.reason(), HasSubstr("worker " + a + " registered again without rank 0"));

  // When the exit report does come within the grace, it decides.
  const std::string id2 = [&] {
    EXPECT_TRUE(Exit(job, 1, mt::v1::RANK_OUTCOME_STOPPED).ok());
    EXPECT_TRUE(jobs_->Cancel(id, "").ok());
    return Submit();
  }();
  const mt::v1::Job job2 = Now(id2);
  ASSERT_EQ(job2.state(), mt::v1::JOB_STATE_SCHEDULED) << job2.reason();
  for (int r = 0; r < 2; ++r) Report(job2, r, mt::v1::RANK_PHASE_TRAINING);
  ReRegister(job2.placement(0).worker_id());
  ASSERT_TRUE(Exit(job2, 0, mt::v1::RANK_OUTCOME_SUCCEEDED).ok());
  ASSERT_TRUE(Exit(job2, 1, mt::v1::RANK_OUTCOME_SUCCEEDED).ok());
  clock_.Advance(absl::Seconds(11));
  HeartbeatAll();
  jobs_->FailOrphans();
  EXPECT_EQ(Now(id2).state(), mt::v1::JOB_STATE_SUCCEEDED) << Now(id2).reason();
}

// The previous attempt's rank on a worker ended while the coordinator could not hear it; the
// daemon registered again without it, the new attempt was placed there, and then the old exit
// report arrived. It must not free the worker of the new attempt's rank.
TEST_F(JobManagerReconnectTest, ALateExitOfTheOldAttemptDoesNotFreeTheNewAttemptsWorker) {
  const std::string id = Submit();
  const mt::v1::Job first = Now(id);
  for (int r = 0; r < 2; ++r) Report(first, r, mt::v1::RANK_PHASE_TRAINING);
  const std::string a = first.placement(0).worker_id();
  const std::string b = first.placement(1).worker_id();
  std::string c;
  for (const std::string& w : workers_) {
    if (w != a && w != b) c = w;
  }
  ASSERT_TRUE(registry_->Drain(c).ok());  // the restart must land on a and b
  ASSERT_TRUE(Exit(first, 1, mt::v1::RANK_OUTCOME_FAILED).ok());
  ASSERT_EQ(Now(id).state(), mt::v1::JOB_STATE_RESTARTING);
  ReRegister(a);  // its rank was stopped; the exit report is still on its way
  clock_.Advance(absl::Seconds(10 + 31));  // the restart's patience
  HeartbeatAll();
  jobs_->AdvanceRestarts();
  const mt::v1::Job second = Now(id);
  ASSERT_EQ(second.state(), mt::v1::JOB_STATE_SCHEDULED) << second.reason();
  ASSERT_EQ(second.attempt(), 1);
  std::string holds;
  ASSERT_EQ(StateOf(a, &holds), mt::v1::WORKER_STATE_BUSY);
  ASSERT_TRUE(Exit(first, 0, mt::v1::RANK_OUTCOME_STOPPED).ok());  // the late one
  EXPECT_EQ(StateOf(a, &holds), mt::v1::WORKER_STATE_BUSY);
  EXPECT_EQ(holds, id);
  jobs_->FailOrphans();
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_SCHEDULED) << Now(id).reason();
}

}  // namespace
}  // namespace mt::coordinator
