// The job manager's automatic restart (restart_policy.h) over a real Store (SQLite) and
// WorkerRegistry, a fake clock, and checkpoint directories written here: which state follows a
// rank failure or a lost worker, what the restarted ranks are told to resume from, and when the
// job fails instead. The same through real processes: tests/integration/restart_jobs_test.cc.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/clock.h"
#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "common/checkpoint/checkpoint_dir.h"
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

using ::testing::HasSubstr;

std::string SpecYaml(const std::string& save_dir, int max_restarts,
                     const std::string& restart_extra = "") {
  return absl::StrCat(
      "name: r\n"
      "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16}\n"
      "parallel: {tp: 1, pp: 1, dp: 2}\n"
      "training: {micro_batch_size: 2, global_batch_size: 8, train_iters: 20, lr: 1.0e-3}\n"
      "data:\n  data_path: /data/x\n"
      "  tokenizer: {vocab_file: /v.json, merge_file: /m.txt}\n",
      save_dir.empty() ? "" : absl::StrCat("checkpoint: {save_dir: ", save_dir, "}\n"),
      "restart: {max_restarts: ", max_restarts, restart_extra, "}\n");
}

// A checkpoint at `step` that verifies (a manifest listing no files) and `latest` on it.
void WriteCheckpoint(const std::string& save_dir, int64_t step, double loss = 0,
                     double validation_loss = std::nan("")) {
  const std::string dir = save_dir + "/" + checkpoint::IterationDirName(step);
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  mt::v1::CheckpointManifest m;
  m.set_format(checkpoint::kFormatName);
  m.set_format_version(checkpoint::kFormatVersion);
  m.set_step(step);
  m.set_loss(loss);
  m.set_validation_loss(validation_loss);
  ASSERT_TRUE(checkpoint::WriteManifest(dir, m).ok());
  ASSERT_TRUE(checkpoint::WriteLatest(save_dir, step).ok());
}

class JobManagerRestartTest : public JobManagerTestBase {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SetUpManager("jm_restart", 3));
    save_dir_ = dir_ + "/ckpt";
  }

  std::string Submit(const std::string& save_dir, int max_restarts = 3,
                     const std::string& restart_extra = "") {
    auto parsed = spec::ParseYamlSpec(SpecYaml(save_dir, max_restarts, restart_extra));
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

  // The assignments sent for the job's current attempt, by rank.
  std::vector<mt::v1::Assignment> Assignments() {
    std::vector<mt::v1::Assignment> out;
    for (const std::string& w : workers_) {
      for (auto& c : jobs_->TakeCommands(w, absl::ZeroDuration())) {
        if (c.has_assign()) out.push_back(c.assign());
      }
    }
    return out;
  }

  void AllTraining(const mt::v1::Job& job) {
    for (const auto& p : job.placement()) {
      mt::v1::RankReport r;
      r.set_worker_id(p.worker_id());
      r.set_job_id(job.id());
      r.set_attempt(job.attempt());
      r.set_rank(p.coordinates().rank());
      r.set_phase(mt::v1::RANK_PHASE_TRAINING);
      ASSERT_TRUE(jobs_->OnRankReport(r).ok());
    }
  }

  absl::Status Exit(const mt::v1::Job& job, int rank, mt::v1::RankOutcome outcome,
                    const std::string& message = "exit code 1: boom") {
    mt::v1::RankExitReport r;
    r.set_worker_id(job.placement(rank).worker_id());
    r.set_job_id(job.id());
    r.set_attempt(job.attempt());
    r.set_rank(rank);
    r.set_outcome(outcome);
    r.set_message(message);
    return jobs_->OnRankExit(r);
  }

  std::vector<mt::v1::JobState> States(const std::string& id) {
    std::vector<mt::v1::JobState> out;
    auto j = jobs_->Get(id, true);
    if (j.ok()) {
      for (const auto& e : j->events()) out.push_back(e.state());
    }
    return out;
  }

  std::string save_dir_;
};

TEST_F(JobManagerRestartTest, RankFailureRestartsFromTheLatestCheckpoint) {
  const std::string id = Submit(save_dir_);
  mt::v1::Job job = Now(id);
  ASSERT_EQ(job.state(), mt::v1::JOB_STATE_SCHEDULED);
  std::vector<mt::v1::Assignment> first = Assignments();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].resume_from(), "");
  AllTraining(job);
  WriteCheckpoint(save_dir_, 4);
  WriteCheckpoint(save_dir_, 8);

  ASSERT_TRUE(Exit(job, 1, mt::v1::RANK_OUTCOME_FAILED).ok());
  mt::v1::Job restarting = Now(id);
  EXPECT_EQ(restarting.state(), mt::v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(restarting.reason(), HasSubstr("failed: exit code 1: boom"));
  EXPECT_THAT(restarting.reason(), HasSubstr("restart 1 of at most 3"));
  // The other rank is told to stop; the job waits for it to end.
  std::vector<mt::v1::WorkerCommand> stops =
      jobs_->TakeCommands(job.placement(0).worker_id(), absl::ZeroDuration());
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_TRUE(stops[0].has_stop());
  EXPECT_EQ(stops[0].stop().attempt(), 0);
  jobs_->AdvanceRestarts();
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_RESTARTING);

  ASSERT_TRUE(Exit(job, 0, mt::v1::RANK_OUTCOME_STOPPED, "stopped").ok());
  jobs_->AdvanceRestarts();
  mt::v1::Job restarted = Now(id);
  EXPECT_EQ(restarted.state(), mt::v1::JOB_STATE_SCHEDULED);  // through PENDING, placed again
  EXPECT_EQ(restarted.attempt(), 1);
  const std::string at8 = save_dir_ + "/iter_0000008";
  EXPECT_EQ(restarted.resume_from(), at8);
  EXPECT_EQ(restarted.resume_step(), 8);
  std::vector<mt::v1::Assignment> second = Assignments();
  ASSERT_EQ(second.size(), 2u);
  for (const auto& a : second) {
    EXPECT_EQ(a.attempt(), 1);
    EXPECT_EQ(a.resume_from(), at8);
  }
  EXPECT_EQ(States(id), (std::vector<mt::v1::JobState>{
                            mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_SCHEDULED,
                            mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_RESTARTING,
                            mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_SCHEDULED}));
  auto events = jobs_->Get(id, true);
  ASSERT_TRUE(events.ok());
  EXPECT_THAT(events->events(4).reason(), HasSubstr("restart 1 from " + at8 + " (step 8)"));
  EXPECT_EQ(events->events(4).attempt(), 1);

  // A late report of the old attempt changes nothing.
  ASSERT_TRUE(Exit(job, 1, mt::v1::RANK_OUTCOME_FAILED).ok());
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_SCHEDULED);

  // Failing again with a newer checkpoint restarts again; without one, the job fails.
  AllTraining(restarted);
  WriteCheckpoint(save_dir_, 12);
  ASSERT_TRUE(Exit(restarted, 0, mt::v1::RANK_OUTCOME_FAILED).ok());
  ASSERT_TRUE(Exit(restarted, 1, mt::v1::RANK_OUTCOME_STOPPED, "stopped").ok());
  jobs_->AdvanceRestarts();
  mt::v1::Job third = Now(id);
  EXPECT_EQ(third.attempt(), 2);
  EXPECT_EQ(third.resume_step(), 12);
  Assignments();
  ASSERT_TRUE(Exit(third, 0, mt::v1::RANK_OUTCOME_FAILED).ok());
  ASSERT_TRUE(Exit(third, 1, mt::v1::RANK_OUTCOME_FAILED).ok());
  jobs_->AdvanceRestarts();
  mt::v1::Job failed = Now(id);
  EXPECT_EQ(failed.state(), mt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(failed.reason(),
              HasSubstr("no new checkpoint since restart 2 (which resumed from step 12)"));
  EXPECT_EQ(registry_->Counts().idle, 3);  // every slot released
}

TEST_F(JobManagerRestartTest, LostWorkerRestartsFromScratchBeforeTheFirstSave) {
  const std::string id = Submit(save_dir_);
  mt::v1::Job job = Now(id);
  Assignments();
  AllTraining(job);
  const std::string lost = job.placement(0).worker_id();
  clock_.Advance(absl::Seconds(5));
  for (const std::string& w : workers_) {
    if (w != lost) {
      ASSERT_TRUE(registry_->Heartbeat(w).ok());
    }
  }
  clock_.Advance(absl::Seconds(6));
  ASSERT_EQ(registry_->SweepLost(), std::vector<std::string>{lost});
  jobs_->OnWorkerLost(lost);
  mt::v1::Job restarting = Now(id);
  EXPECT_EQ(restarting.state(), mt::v1::JOB_STATE_RESTARTING);
  // The event names the worker's node and how long it was silent.
  EXPECT_THAT(restarting.reason(),
              HasSubstr("worker " + lost + " on node " + job.placement(0).node() +
                        " running rank 0 was lost (no heartbeat for"));
  EXPECT_FALSE(job.placement(0).node().empty());
  ASSERT_TRUE(Exit(job, 1, mt::v1::RANK_OUTCOME_STOPPED, "stopped").ok());
  jobs_->AdvanceRestarts();
  mt::v1::Job restarted = Now(id);
  EXPECT_EQ(restarted.state(), mt::v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(restarted.attempt(), 1);
  EXPECT_EQ(restarted.resume_from(), "");  // the spec's own start
  for (const auto& p : restarted.placement()) EXPECT_NE(p.worker_id(), lost);
  auto events = jobs_->Get(id, true);
  ASSERT_TRUE(events.ok());
  EXPECT_THAT(events->events(4).reason(),
              HasSubstr("restart 1 from scratch (no checkpoint in save_dir yet)"));
}

TEST_F(JobManagerRestartTest, AHungRankDoesNotBlockTheRestartForEver) {
  const std::string id = Submit(save_dir_);
  mt::v1::Job job = Now(id);
  Assignments();
  ASSERT_TRUE(Exit(job, 0, mt::v1::RANK_OUTCOME_FAILED).ok());
  jobs_->AdvanceRestarts();
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_RESTARTING);  // rank 1 still stopping
  clock_.Advance(absl::Seconds(10 + 31));                    // stop grace + margin
  for (const std::string& w : workers_) ASSERT_TRUE(registry_->Heartbeat(w).ok());
  jobs_->AdvanceRestarts();
  mt::v1::Job requeued = Now(id);
  EXPECT_EQ(requeued.attempt(), 1);
  // Placed on the two free workers; rank 1's stays busy with attempt 0 until it ends.
  EXPECT_EQ(requeued.state(), mt::v1::JOB_STATE_SCHEDULED);
  const std::string hung = job.placement(1).worker_id();
  for (const auto& p : requeued.placement()) EXPECT_NE(p.worker_id(), hung);
  EXPECT_EQ(registry_->Counts().idle, 0);
  ASSERT_TRUE(Exit(job, 1, mt::v1::RANK_OUTCOME_STOPPED, "killed").ok());  // frees its worker
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(registry_->Counts().idle, 1);
}

// Found by the chaos soak (tests/chaos): the jobs a restarted coordinator read back from its
// store had no hang detector, so a rank that stalled across the restart was never found hung;
// the healthy ranks' collective timeout ended the job instead, blaming one of them.
TEST_F(JobManagerRestartTest, AJobRunningAcrossACoordinatorRestartIsStillWatchedForHangs) {
  const std::string id = Submit(save_dir_, 3, ", hang_timeout_floor_seconds: 10");
  Assignments();
  AllTraining(Now(id));
  ASSERT_EQ(Now(id).state(), mt::v1::JOB_STATE_RUNNING);
  // The coordinator restarts: a new job manager over the same store.
  jobs_.reset();
  JobManagerOptions o;
  o.coordinator_address = "localhost:1";
  auto jobs = JobManager::Create(store_.get(), registry_.get(), &clock_, o);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  jobs_ = std::move(*jobs);
  ASSERT_EQ(Now(id).state(), mt::v1::JOB_STATE_RUNNING);
  // No beacon comes from the ranks (one is stopped, the other waits for it) for the floor.
  clock_.Advance(absl::Seconds(9));
  jobs_->CheckHangs();
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_RUNNING);
  clock_.Advance(absl::Seconds(2));
  for (const std::string& w : workers_) ASSERT_TRUE(registry_->Heartbeat(w).ok());
  jobs_->CheckHangs();
  const mt::v1::Job hung = Now(id);
  EXPECT_EQ(hung.state(), mt::v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(hung.reason(), HasSubstr("made no progress for 11 s"));
}

// A cancel stops the ranks the way a stop signal does and gives their save the job's
// save/load timeout before SIGKILL (it used to be the coordinator's 10 s stop grace, whatever
// the size of the save); no_save kills at once. Once every rank has exited, an event names the
// step saved.
TEST_F(JobManagerRestartTest, CancelGivesTheStopSaveItsTimeoutAndSaysWhichStepWasSaved) {
  const std::string id = Submit(save_dir_, 3, ", save_load_timeout_seconds: 120");
  Assignments();
  mt::v1::Job job = Now(id);
  AllTraining(job);
  MT_ASSERT_OK(jobs_->Cancel(id, "enough").status());
  for (int r = 0; r < 2; ++r) {
    std::vector<mt::v1::WorkerCommand> stops =
        jobs_->TakeCommands(job.placement(r).worker_id(), absl::ZeroDuration());
    ASSERT_EQ(stops.size(), 1u);
    EXPECT_EQ(stops[0].stop().grace_seconds(), 10 + 120);  // stop grace + save/load timeout
    EXPECT_FALSE(stops[0].stop().no_save());
  }
  WriteCheckpoint(save_dir_, 7);  // the ranks stopped at step 7 and saved it
  for (int r = 0; r < 2; ++r) {
    mt::v1::RankExitReport exit;
    exit.set_worker_id(job.placement(r).worker_id());
    exit.set_job_id(id);
    exit.set_attempt(0);
    exit.set_rank(r);
    exit.set_outcome(mt::v1::RANK_OUTCOME_STOPPED);
    exit.mutable_final_progress()->set_step(7);
    MT_ASSERT_OK(jobs_->OnRankExit(exit));
  }
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Job ended, jobs_->Get(id, true));
  EXPECT_EQ(ended.state(), mt::v1::JOB_STATE_CANCELLED);
  ASSERT_GE(ended.events_size(), 1);
  EXPECT_EQ(ended.events(ended.events_size() - 1).reason(),
            absl::StrCat("every rank stopped after the cancel at step 7: saved step 7 to ",
                         save_dir_, "/", checkpoint::IterationDirName(7)));

  const std::string other = Submit(save_dir_ + "2");
  mt::v1::Job second = Now(other);
  Assignments();
  AllTraining(second);
  MT_ASSERT_OK(jobs_->Cancel(other, "", "", /*no_save=*/true).status());
  std::vector<mt::v1::WorkerCommand> stops =
      jobs_->TakeCommands(second.placement(0).worker_id(), absl::ZeroDuration());
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_TRUE(stops[0].stop().no_save());
}

// Rendezvous keys outlive a coordinator restart (issue 19): one rank published, the coordinator
// restarted (a new job manager over the reopened store), another rank's read finds the key at
// once instead of waiting out its timeout. Keys of an attempt that ended are removed.
TEST_F(JobManagerRestartTest, RendezvousKeysSurviveACoordinatorRestart) {
  const std::string id = Submit(save_dir_);
  Assignments();
  ASSERT_EQ(Now(id).state(), mt::v1::JOB_STATE_SCHEDULED);
  MT_ASSERT_OK(jobs_->RendezvousSet(id, 0, "rank0/address", "10.0.0.1:4000"));
  MT_ASSERT_OK(jobs_->RendezvousAdd(id, 0, "barrier", 1).status());
  jobs_.reset();
  store_.reset();
  MT_ASSERT_OK_AND_ASSIGN(store_, Store::Open(dir_ + "/state"));
  JobManagerOptions o;
  o.coordinator_address = "localhost:1";
  MT_ASSERT_OK_AND_ASSIGN(jobs_, JobManager::Create(store_.get(), registry_.get(), &clock_, o));
  const absl::Time start = absl::Now();
  MT_ASSERT_OK_AND_ASSIGN(std::vector<std::string> got,
                          jobs_->RendezvousGet(id, 0, {"rank0/address"}, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(got, std::vector<std::string>{"10.0.0.1:4000"});
  MT_ASSERT_OK_AND_ASSIGN(int64_t count, jobs_->RendezvousAdd(id, 0, "barrier", 1));
  EXPECT_EQ(count, 2);
  // The attempt ends: its keys leave the store too.
  MT_ASSERT_OK(jobs_->Cancel(id, "done").status());
  MT_ASSERT_OK_AND_ASSIGN(std::vector<Store::RendezvousKey> kept, store_->AllRendezvousKeys());
  EXPECT_TRUE(kept.empty());
}

// Found by the chaos soak: a worker killed just after the final save restarts the job from that
// checkpoint; the new attempt trains nothing and its reporter's progress (step 0, loss 0) used to
// replace the final step and loss the job had reached, so it SUCCEEDED "at step 0".
TEST_F(JobManagerRestartTest, AJobResumedFromItsFinalCheckpointKeepsItsFinalLoss) {
  const std::string id = Submit(save_dir_);
  mt::v1::Job job = Now(id);
  Assignments();
  AllTraining(job);
  mt::v1::RankExitReport done;
  done.set_worker_id(job.placement(0).worker_id());
  done.set_job_id(id);
  done.set_attempt(0);
  done.set_rank(0);
  done.set_outcome(mt::v1::RANK_OUTCOME_SUCCEEDED);
  done.mutable_final_progress()->set_step(20);
  done.mutable_final_progress()->set_loss(1.25);
  done.mutable_final_progress()->set_validation_loss(1.5);
  ASSERT_TRUE(jobs_->OnRankExit(done).ok());
  WriteCheckpoint(save_dir_, 20, 1.25, 1.5);
  ASSERT_TRUE(Exit(job, 1, mt::v1::RANK_OUTCOME_FAILED, "killed by signal 9").ok());
  jobs_->AdvanceRestarts();
  mt::v1::Job resumed = Now(id);
  ASSERT_EQ(resumed.attempt(), 1);
  ASSERT_EQ(resumed.resume_step(), 20);
  Assignments();
  AllTraining(resumed);
  for (int rank = 0; rank < 2; ++rank) {
    mt::v1::RankExitReport r;
    r.set_worker_id(resumed.placement(rank).worker_id());
    r.set_job_id(id);
    r.set_attempt(1);
    r.set_rank(rank);
    r.set_outcome(mt::v1::RANK_OUTCOME_SUCCEEDED);
    r.mutable_final_progress()->set_validation_loss(1.75);  // no step trained: step 0, loss 0
    ASSERT_TRUE(jobs_->OnRankExit(r).ok());
  }
  const mt::v1::Job end = Now(id);
  EXPECT_EQ(end.state(), mt::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(end.progress().step(), 20);
  EXPECT_EQ(end.progress().loss(), 1.25);
  EXPECT_EQ(end.progress().validation_loss(), 1.5);
}

// The same when the reporter's last progress predates the final save (its worker was cut off
// before it reported step 20): the job ends with the final checkpoint's step and losses.
TEST_F(JobManagerRestartTest, AJobResumedFromItsFinalCheckpointEndsWithThatCheckpointsLoss) {
  const std::string id = Submit(save_dir_);
  mt::v1::Job job = Now(id);
  Assignments();
  AllTraining(job);
  mt::v1::RankReport last;
  last.set_worker_id(job.placement(0).worker_id());
  last.set_job_id(id);
  last.set_attempt(0);
  last.set_rank(0);
  last.mutable_progress()->set_step(15);
  last.mutable_progress()->set_loss(2.5);
  ASSERT_TRUE(jobs_->OnRankReport(last).ok());
  WriteCheckpoint(save_dir_, 20, 1.25, 1.5);
  ASSERT_TRUE(Exit(job, 0, mt::v1::RANK_OUTCOME_FAILED, "worker lost").ok());
  ASSERT_TRUE(Exit(job, 1, mt::v1::RANK_OUTCOME_STOPPED, "stopped").ok());
  jobs_->AdvanceRestarts();
  mt::v1::Job resumed = Now(id);
  ASSERT_EQ(resumed.resume_step(), 20);
  Assignments();
  AllTraining(resumed);
  for (int rank = 0; rank < 2; ++rank) {
    mt::v1::RankExitReport r;
    r.set_worker_id(resumed.placement(rank).worker_id());
    r.set_job_id(id);
    r.set_attempt(1);
    r.set_rank(rank);
    r.set_outcome(mt::v1::RANK_OUTCOME_SUCCEEDED);
    r.mutable_final_progress();  // no step trained
    ASSERT_TRUE(jobs_->OnRankExit(r).ok());
  }
  const mt::v1::Job end = Now(id);
  EXPECT_EQ(end.state(), mt::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(end.progress().step(), 20);
  EXPECT_EQ(end.progress().loss(), 1.25);
  EXPECT_EQ(end.progress().validation_loss(), 1.5);
}

// A rank that never reaches training (SCHEDULED) is caught at the hang floor (60 s by default)
// from the placement, named with its phase, and the job restarts like after a hang.
TEST_F(JobManagerRestartTest, ARankThatNeverStartsTrainingIsAHangNamingItsPhase) {
  const std::string id = Submit(save_dir_);
  const mt::v1::Job job = Now(id);
  Assignments();
  mt::v1::RankReport starting;
  starting.set_worker_id(job.placement(0).worker_id());
  starting.set_job_id(id);
  starting.set_rank(0);
  starting.set_phase(mt::v1::RANK_PHASE_STARTING);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(jobs_->OnRankReport(starting).ok());
  clock_.Advance(absl::Seconds(58));
  jobs_->CheckHangs();
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_SCHEDULED);
  EXPECT_GE(Now(id).progress().no_progress_seconds(), 58);
  clock_.Advance(absl::Seconds(1));
  jobs_->CheckHangs();
  const mt::v1::Job hung = Now(id);
  EXPECT_EQ(hung.state(), mt::v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(hung.reason(),
              HasSubstr("hung at startup: rank 1 on worker " + job.placement(1).worker_id() +
                        " (node " + job.placement(1).node() +
                        ") did not reach training: not started (its trainer never reported), "
                        "no progress for 60 s"));
  EXPECT_THAT(hung.reason(), HasSubstr("restart 1 of at most 3"));
  EXPECT_EQ(jobs_->HangsDetected(), 1);
}

// A failed save is counted once per job and step (every rank reports it) and recorded as an
// event naming the step, the rank and the error.
TEST_F(JobManagerRestartTest, AFailedSaveIsCountedOnceAndIsAnEvent) {
  const std::string id = Submit(save_dir_);
  const mt::v1::Job job = Now(id);
  Assignments();
  AllTraining(job);
  EXPECT_EQ(jobs_->CheckpointSaveFailures(), 0);
  for (int rank : {1, 0, 1}) {
    mt::v1::RankReport r;
    r.set_worker_id(job.placement(rank).worker_id());
    r.set_job_id(id);
    r.set_rank(rank);
    r.mutable_checkpoint_save_failure()->set_step(8);
    r.mutable_checkpoint_save_failure()->set_error("writing shard 1: No space left on device");
    ASSERT_TRUE(jobs_->OnRankReport(r).ok());
  }
  EXPECT_EQ(jobs_->CheckpointSaveFailures(), 1);
  auto events = jobs_->Get(id, true);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->events(events->events_size() - 1).reason(),
            "checkpoint save of step 8 failed on rank 1 (" + job.placement(1).worker_id() +
                "): writing shard 1: No space left on device");
  // Another step's failure counts again; a report of an unknown job counts nothing.
  mt::v1::RankReport again;
  again.set_worker_id(job.placement(0).worker_id());
  again.set_job_id(id);
  again.set_rank(0);
  again.mutable_checkpoint_save_failure()->set_step(12);
  ASSERT_TRUE(jobs_->OnRankReport(again).ok());
  again.set_job_id("j-99");
  EXPECT_FALSE(jobs_->OnRankReport(again).ok());
  EXPECT_EQ(jobs_->CheckpointSaveFailures(), 2);
}

TEST_F(JobManagerRestartTest, NoSaveDirMaxRestartsAndDamagedCheckpointsFail) {
  // No checkpoint.save_dir: failed at once.
  const std::string a = Submit("");
  mt::v1::Job ja = Now(a);
  Assignments();
  ASSERT_TRUE(Exit(ja, 0, mt::v1::RANK_OUTCOME_FAILED).ok());
  EXPECT_EQ(Now(a).state(), mt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Now(a).reason(), HasSubstr("not restarted: the job saves no checkpoints"));
  ASSERT_TRUE(Exit(ja, 1, mt::v1::RANK_OUTCOME_STOPPED).ok());

  // max_restarts 0: failed at once.
  const std::string b = Submit(save_dir_, 0);
  mt::v1::Job jb = Now(b);
  Assignments();
  ASSERT_TRUE(Exit(jb, 1, mt::v1::RANK_OUTCOME_FAILED).ok());
  EXPECT_EQ(Now(b).state(), mt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Now(b).reason(), HasSubstr("restart.max_restarts is 0"));
  ASSERT_TRUE(Exit(jb, 0, mt::v1::RANK_OUTCOME_STOPPED).ok());

  // Only a damaged checkpoint (its manifest lists a file that is not there): failed.
  const std::string c = Submit(save_dir_);
  mt::v1::Job jc = Now(c);
  Assignments();
  WriteCheckpoint(save_dir_, 4);
  mt::v1::CheckpointManifest m;
  m.set_format(checkpoint::kFormatName);
  m.set_format_version(checkpoint::kFormatVersion);
  m.set_step(4);
  m.add_files()->set_path("mp_rank_00_000.safetensors");
  ASSERT_TRUE(checkpoint::WriteManifest(save_dir_ + "/iter_0000004", m).ok());
  ASSERT_TRUE(Exit(jc, 0, mt::v1::RANK_OUTCOME_FAILED).ok());
  ASSERT_TRUE(Exit(jc, 1, mt::v1::RANK_OUTCOME_FAILED).ok());
  jobs_->AdvanceRestarts();
  EXPECT_EQ(Now(c).state(), mt::v1::JOB_STATE_FAILED);
  EXPECT_THAT(Now(c).reason(), HasSubstr("not restarted: no checkpoint in " + save_dir_));
  EXPECT_THAT(Now(c).reason(), HasSubstr("mp_rank_00_000.safetensors"));
}

TEST_F(JobManagerRestartTest, CancelWhileRestartingWins) {
  const std::string id = Submit(save_dir_);
  mt::v1::Job job = Now(id);
  Assignments();
  ASSERT_TRUE(Exit(job, 0, mt::v1::RANK_OUTCOME_FAILED).ok());
  ASSERT_EQ(Now(id).state(), mt::v1::JOB_STATE_RESTARTING);
  ASSERT_TRUE(jobs_->Cancel(id, "enough").ok());
  ASSERT_TRUE(Exit(job, 1, mt::v1::RANK_OUTCOME_STOPPED).ok());
  jobs_->AdvanceRestarts();
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(Now(id).attempt(), 0);
}

TEST_F(JobManagerRestartTest, LoadingAnOlderCheckpointThanLatestIsAnEvent) {
  WriteCheckpoint(save_dir_, 4);
  WriteCheckpoint(save_dir_, 8);  // `latest` names 8; the trainer found it damaged
  const std::string id = Submit(save_dir_);
  mt::v1::Job job = Now(id);
  mt::v1::RankReport r;
  r.set_worker_id(job.placement(0).worker_id());
  r.set_job_id(id);
  r.set_rank(0);
  r.set_phase(mt::v1::RANK_PHASE_STARTING);
  r.mutable_checkpoint_load()->set_step(4);
  r.mutable_checkpoint_load()->set_directory(save_dir_ + "/iter_0000004");
  ASSERT_TRUE(jobs_->OnRankReport(r).ok());
  auto with_events = jobs_->Get(id, true);
  ASSERT_TRUE(with_events.ok());
  const std::string last = with_events->events().rbegin()->reason();
  EXPECT_THAT(last, HasSubstr("resumed from " + save_dir_ +
                              "/iter_0000004 (step 4), not from "
                              "the latest, iter_0000008"));
  EXPECT_EQ(with_events->state(), mt::v1::JOB_STATE_SCHEDULED);
  // Loading the latest itself is no event.
  const int events = with_events->events_size();
  r.mutable_checkpoint_load()->set_step(8);
  r.mutable_checkpoint_load()->set_directory(save_dir_ + "/iter_0000008");
  ASSERT_TRUE(jobs_->OnRankReport(r).ok());
  EXPECT_EQ(jobs_->Get(id, true)->events_size(), events);
}

TEST_F(JobManagerRestartTest, OnlyTheHoldingWorkerEndsARank) {
  const std::string id = Submit(save_dir_);
  mt::v1::Job job = Now(id);
  ASSERT_EQ(job.state(), mt::v1::JOB_STATE_SCHEDULED);
  std::string stranger;
  for (const std::string& w : workers_) {
    if (w != job.placement(0).worker_id() && w != job.placement(1).worker_id()) stranger = w;
  }
  mt::v1::RankExitReport r;
  r.set_worker_id(stranger);
  r.set_job_id(id);
  r.set_rank(0);
  r.set_outcome(mt::v1::RANK_OUTCOME_FAILED);
  EXPECT_THAT(jobs_->OnRankExit(r),
              mt::testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                    HasSubstr("runs on " + job.placement(0).worker_id())));
  EXPECT_EQ(Now(id).state(), mt::v1::JOB_STATE_SCHEDULED);
  auto holder = registry_->Get(job.placement(0).worker_id());
  ASSERT_TRUE(holder.ok());
  EXPECT_EQ(holder->state(), mt::v1::WORKER_STATE_BUSY);  // not released by the stranger
}

TEST_F(JobManagerRestartTest, SecondLiveJobWithTheSameSaveDirIsRefused) {
  const std::string first = Submit(save_dir_);
  auto parsed = spec::ParseYamlSpec(SpecYaml(save_dir_, 3));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(jobs_->Submit(parsed->spec, "").status(),
              mt::testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                    HasSubstr(save_dir_ + " is in use by job " + first)));
  ASSERT_TRUE(jobs_->Cancel(first, "done").ok());
  EXPECT_TRUE(jobs_->Submit(parsed->spec, "").ok());  // an ended job holds nothing
}

TEST_F(JobManagerRestartTest, DeleteForgetsOnlyEndedJobsWhoseRanksExited) {
  const std::string id = Submit("");
  mt::v1::Job job = Now(id);
  ASSERT_EQ(job.state(), mt::v1::JOB_STATE_SCHEDULED);
  EXPECT_THAT(jobs_->Delete(id).status(),
              mt::testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                    HasSubstr("stop it first (mtctl cancel " + id + ")")));
  ASSERT_TRUE(jobs_->Cancel(id, "").ok());
  EXPECT_THAT(
      jobs_->Delete(id).status(),
      mt::testing::StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("still has rank")));
  ASSERT_TRUE(Exit(job, 0, mt::v1::RANK_OUTCOME_STOPPED, "stopped").ok());
  ASSERT_TRUE(Exit(job, 1, mt::v1::RANK_OUTCOME_STOPPED, "stopped").ok());
  auto deleted = jobs_->Delete(id);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->state(), mt::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(jobs_->Get(id, true).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetJob(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(jobs_->CountByState().count(mt::v1::JOB_STATE_CANCELLED), 0u);
  EXPECT_EQ(jobs_->Delete(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Submit(""), "j-2");  // ids are not reused
}

TEST_F(JobManagerRestartTest, RetentionDeletesTheOldestEndedJobs) {
  const std::string running = Submit("");  // placed: holds 2 of the 3 workers
  const std::string a = Submit("");        // pending
  const std::string b = Submit("");
  const std::string c = Submit("");
  for (const std::string& id : {a, b}) ASSERT_TRUE(jobs_->Cancel(id, "").ok());
  clock_.Advance(absl::Hours(2));
  ASSERT_TRUE(jobs_->Cancel(c, "").ok());
  EXPECT_EQ(jobs_->PruneEnded(0, absl::ZeroDuration()), 0);  // no policy: keep all
  EXPECT_EQ(jobs_->PruneEnded(2, absl::ZeroDuration()), 1);  // a, the oldest ended
  EXPECT_EQ(jobs_->Get(a, false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(jobs_->PruneEnded(0, absl::Hours(1)), 1);  // b ended 2 h ago; c just now
  EXPECT_EQ(jobs_->Get(b, false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(jobs_->Get(c, false).ok());
  EXPECT_EQ(Now(running).state(), mt::v1::JOB_STATE_SCHEDULED);  // live jobs are never pruned
}

// What an observer is told of deletions (the coordinator's metrics drop a deleted job's
// series on it, coordinator_metrics.h).
class DeletionRecorder : public JobObserver {
 public:
  void OnJobTransition(const mt::v1::Job&, mt::v1::JobState, mt::v1::JobState,
                       absl::Time) override {}
  void OnJobDeleted(const mt::v1::Job& job) override {
    deleted.push_back(absl::StrCat(job.id(), " ", mt::v1::JobState_Name(job.state())));
  }
  std::vector<std::string> deleted;
};

class JobManagerDeletionTest : public JobManagerRestartTest {
 protected:
  void SetUp() override {
    JobManagerOptions o;
    o.observer = &recorder_;
    ASSERT_NO_FATAL_FAILURE(SetUpManager("jm_deletion", 3, o));
  }
  DeletionRecorder recorder_;
};

TEST_F(JobManagerDeletionTest, TheObserverHearsOfEveryDeletionByHandAndByRetention) {
  const std::string a = Submit("");  // placed
  const std::string b = Submit("");  // pending
  const std::string c = Submit("");
  ASSERT_TRUE(jobs_->Cancel(b, "").ok());
  ASSERT_TRUE(jobs_->Cancel(c, "").ok());
  EXPECT_FALSE(jobs_->Delete(a).ok());  // live: not deleted, not reported
  EXPECT_THAT(recorder_.deleted, ::testing::IsEmpty());
  ASSERT_TRUE(jobs_->Delete(b).ok());
  EXPECT_EQ(jobs_->PruneEnded(0, absl::Nanoseconds(1)), 0);  // c ended just now
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(jobs_->PruneEnded(0, absl::Nanoseconds(1)), 1);
  EXPECT_THAT(recorder_.deleted,
              ::testing::ElementsAre(b + " JOB_STATE_CANCELLED", c + " JOB_STATE_CANCELLED"));
}

}  // namespace
}  // namespace mt::coordinator
