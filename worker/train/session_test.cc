// The rank session through fakes: a tiny GPT (2 layers x 32 hidden) on the CPU with synthetic
// data, FakeSessionReporter recording what the session reports, and save exchanges that fail
// on purpose. Each drift between the service and `mt-worker train` fixed by the session has a
// test here (skipped damaged checkpoints are reported; a failed async save is never hidden).
#include "worker/train/session.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/spec/defaults.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"
#include "worker/report/report_channel.h"
#include "worker/train/fake_session_reporter.h"
#include "worker/train/pipe_reporter.h"

namespace mt::train {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

mt::v1::JobSpec TinySpec(int64_t iterations) {
  mt::v1::JobSpec spec;
  spec.set_name("tiny");
  mt::v1::ModelSpec* m = spec.mutable_model();
  m->set_num_layers(2);
  m->set_hidden_size(32);
  m->set_num_attention_heads(4);
  m->set_seq_length(16);
  m->set_vocab_size(128);
  mt::v1::TrainingSpec* t = spec.mutable_training();
  t->set_micro_batch_size(2);
  t->set_train_iters(iterations);
  t->set_lr(1e-3);
  spec::ApplyDefaults(&spec);
  EXPECT_TRUE(spec::ResolveForLayout(&spec, 1).ok());
  return spec;
}

SessionConfig TinyConfig(const mt::v1::JobSpec& spec) {
  SessionConfig c;
  c.spec = spec;
  c.make_data = [spec](int64_t consumed) {
    return engine::SyntheticDataSources(spec, 0, 1, consumed);
  };
  c.trainer.log_progress = false;
  c.checkpointer.job_id = "session-test";
  return c;
}

TEST(SessionTest, TrainsReportsAndSaves) {
  mt::v1::JobSpec spec = TinySpec(4);
  spec.mutable_checkpoint()->set_save_dir(testutil::MakeTempDir("session") + "/ckpt");
  spec.mutable_checkpoint()->set_save_interval(2);
  FakeSessionReporter reporter;
  const SessionResult r = RunSession(TinyConfig(spec), reporter);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.iteration, 4);
  EXPECT_EQ(r.saves, 2);
  EXPECT_THAT(reporter.steps, ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(reporter.saved, ElementsAre(2, 4));
  EXPECT_EQ(reporter.started, 1);
  EXPECT_EQ(reporter.ended, 1);
  EXPECT_TRUE(reporter.skipped.empty());
}

// Flips one byte of a file of the checkpoint at `dir` (not its manifest): its SHA-256 no
// longer matches.
void Damage(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == "manifest.json") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.seekg(0);
    f.get(c);
    f.seekp(0);
    f.put(static_cast<char>(c ^ 0x5a));
    return;
  }
  ADD_FAILURE() << "no file to damage in " << dir;
}

// A save directory whose latest checkpoint (step 4) is damaged; step 2 is good.
std::string SaveDirWithADamagedLatest() {
  mt::v1::JobSpec spec = TinySpec(4);
  const std::string dir = testutil::MakeTempDir("session") + "/ckpt";
  spec.mutable_checkpoint()->set_save_dir(dir);
  spec.mutable_checkpoint()->set_save_interval(2);
  FakeSessionReporter reporter;
  const SessionResult r = RunSession(TinyConfig(spec), reporter);
  EXPECT_TRUE(r.status.ok()) << r.status;
  Damage(dir + "/iter_0000004");
  return dir;
}

TEST(SessionTest, ReportsTheDamagedCheckpointsItSkips) {
  const std::string dir = SaveDirWithADamagedLatest();
  SessionConfig config = TinyConfig(TinySpec(6));
  config.load_path = dir;
  config.load.keep_own_files = true;
  FakeSessionReporter reporter;
  const SessionResult r = RunSession(config, reporter);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(reporter.skipped.size(), 1u);
  EXPECT_THAT(reporter.skipped[0], HasSubstr("iter_0000004"));
  EXPECT_EQ(reporter.chosen_step, 2);
  ASSERT_EQ(reporter.loaded.size(), 1u);
  EXPECT_EQ(reporter.loaded[0].step, 2);
  EXPECT_THAT(reporter.steps, ElementsAre(3, 4, 5, 6));
}

// The service's reporter: the skipped checkpoint is in the rank's log (which the daemon sends
// with the exit report), the load goes over the pipe.
TEST(SessionTest, ServiceReporterLogsSkippedCheckpointsAndReportsTheLoad) {
  const std::string dir = SaveDirWithADamagedLatest();
  mt::v1::JobSpec spec = TinySpec(3);
  SessionConfig config = TinyConfig(spec);
  config.load_path = dir;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  mt::v1::Assignment assignment;
  assignment.set_job_id("session-test");
  PipeReporter reporter(worker::ReportWriter(fds[1]), config.spec, assignment);
  ::testing::internal::CaptureStderr();
  const SessionResult r = RunSession(config, reporter);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ::close(fds[1]);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(log, ::testing::ContainsRegex("skipped checkpoint [^\n]*iter_0000004"));
  EXPECT_THAT(log, HasSubstr("loading " + dir + "/iter_0000002 (step 2)"));
  bool load_reported = false;
  int progress_reports = 0;
  while (true) {
    auto report = worker::ReadReport(fds[0]);
    ASSERT_TRUE(report.ok()) << report.status();
    if (!report->has_value()) break;
    if ((*report)->has_checkpoint_load()) {
      load_reported = true;
      EXPECT_EQ((*report)->checkpoint_load().step(), 2);
    }
    progress_reports += (*report)->has_progress() && (*report)->progress().step() > 0;
  }
  ::close(fds[0]);
  EXPECT_TRUE(load_reported);
  EXPECT_GE(progress_reports, 1);
}

// A LocalExchange whose Gather fails for one step: rank 0 (the only rank) cannot commit that
// step's save.
class FailingExchange : public checkpoint::SaveExchange {
 public:
  explicit FailingExchange(int64_t failing_step) : failing_step_(failing_step) {}
  absl::Status Publish(int64_t step, int rank, const std::string& result) override {
    return local_.Publish(step, rank, result);
  }
  absl::StatusOr<std::vector<std::string>> Gather(int64_t step, int world_size,
                                                  absl::Duration timeout) override {
    if (step == failing_step_) {
      failed_.Notify();
      return absl::UnavailableError("the disk is full");
    }
    return local_.Gather(step, world_size, timeout);
  }
  absl::Notification& failed() { return failed_; }

 private:
  const int64_t failing_step_;
  checkpoint::LocalExchange local_;
  absl::Notification failed_;
};

// The service path used to let the next save's OK replace an async save's failure found at
// the same step (rank_command.cc's save() before the session): the run then succeeded with a
// checkpoint missing.
TEST(SessionTest, FailedAsyncSaveIsNeverHiddenByALaterSave) {
  mt::v1::JobSpec spec = TinySpec(4);
  spec.mutable_checkpoint()->set_save_dir(testutil::MakeTempDir("session") + "/ckpt");
  spec.mutable_checkpoint()->set_save_interval(1);
  spec.mutable_checkpoint()->set_async_save(true);
  FailingExchange exchange(/*failing_step=*/1);
  SessionConfig config = TinyConfig(spec);
  config.exchange = &exchange;
  FakeSessionReporter reporter;
  // Step 1's background save has failed before step 2's saves are looked at.
  reporter.on_step = [&](const engine::StepMetrics& m) {
    if (m.iteration != 2) return;
    ASSERT_TRUE(exchange.failed().WaitForNotificationWithTimeout(absl::Seconds(60)));
    absl::SleepFor(absl::Milliseconds(300));
  };
  const SessionResult r = RunSession(config, reporter);
  EXPECT_EQ(r.failed_at, SessionStage::kSave);
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("the disk is full"));
  EXPECT_LT(r.iteration, 4);  // the failure stopped the run
  EXPECT_THAT(reporter.saved, ::testing::Not(::testing::Contains(1)));
  EXPECT_EQ(reporter.save_failed, std::vector<int64_t>{1});  // told once (the metric counts it)
}

TEST(SessionTest, SyncSaveFailureEndsTheSession) {
  mt::v1::JobSpec spec = TinySpec(4);
  spec.mutable_checkpoint()->set_save_dir(testutil::MakeTempDir("session") + "/ckpt");
  spec.mutable_checkpoint()->set_save_interval(2);
  FailingExchange exchange(/*failing_step=*/2);
  SessionConfig config = TinyConfig(spec);
  config.exchange = &exchange;
  FakeSessionReporter reporter;
  const SessionResult r = RunSession(config, reporter);
  EXPECT_EQ(r.failed_at, SessionStage::kSave);
  EXPECT_EQ(r.iteration, 2);
  EXPECT_TRUE(reporter.saved.empty());
  EXPECT_EQ(reporter.save_failed, std::vector<int64_t>{2});
}

TEST(SessionTest, StopSignalStopsAndSavesWhereTheRunStopped) {
  mt::v1::JobSpec spec = TinySpec(6);
  spec.mutable_checkpoint()->set_save_dir(testutil::MakeTempDir("session") + "/ckpt");
  SessionConfig config = TinyConfig(spec);
  FakeSessionReporter reporter;
  config.stop_signal = [&reporter] { return reporter.steps.size() >= 2 ? 15 : 0; };
  const SessionResult r = RunSession(config, reporter);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.stop_signal, 15);
  EXPECT_EQ(r.iteration, 2);
  EXPECT_THAT(reporter.saved, ElementsAre(2));
}

// Save and evaluation intervals that coincide (4), 12 steps: a run resumed from a checkpoint of
// an evaluation step ends with the undisturbed run's validation loss, bit for bit. The save
// used to run before the step's evaluation: the checkpoint held the validation position before
// it, and the resumed run evaluated on other batches.
mt::v1::JobSpec CoincidingIntervalsSpec(const std::string& save_dir) {
  mt::v1::JobSpec spec = TinySpec(12);
  spec.mutable_evaluation()->set_eval_interval(4);
  spec.mutable_evaluation()->set_eval_iters(2);
  spec.mutable_checkpoint()->set_save_dir(save_dir);
  spec.mutable_checkpoint()->set_save_interval(4);
  return spec;
}

double UndisturbedValidationLoss() {
  FakeSessionReporter reporter;
  const SessionResult r = RunSession(
      TinyConfig(CoincidingIntervalsSpec(testutil::MakeTempDir("session") + "/ckpt")), reporter);
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(r.evaluated);
  EXPECT_EQ(r.iteration, 12);
  return r.last_eval.loss;
}

// The run stops (SIGTERM) after `stop_after` steps; the next one resumes from `resume_from`
// (a checkpoint directory, or the save directory: its latest) and trains to the end.
double ResumedValidationLoss(int stop_after, const std::string& resume_from) {
  const std::string dir = testutil::MakeTempDir("session") + "/ckpt";
  const mt::v1::JobSpec spec = CoincidingIntervalsSpec(dir);
  {
    SessionConfig config = TinyConfig(spec);
    FakeSessionReporter reporter;
    config.stop_signal = [&reporter, stop_after] {
      return static_cast<int>(reporter.steps.size()) >= stop_after ? 15 : 0;
    };
    const SessionResult r = RunSession(config, reporter);
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.iteration, stop_after);
  }
  SessionConfig config = TinyConfig(spec);
  config.load_path = dir + resume_from;
  FakeSessionReporter reporter;
  const SessionResult r = RunSession(config, reporter);
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(reporter.chosen_step, 8);
  EXPECT_EQ(r.iteration, 12);
  return r.last_eval.loss;
}

TEST(SessionTest, ValidationResumesExactlyFromASaveOnAnEvaluationStep) {
  const double undisturbed = UndisturbedValidationLoss();
  // Killed after the interval save of step 8 (the run went on to step 9): resumed from iter_8.
  EXPECT_EQ(ResumedValidationLoss(9, "/iter_0000008"), undisturbed);
}

TEST(SessionTest, ValidationResumesExactlyAfterAStopOnAnEvaluationStep) {
  const double undisturbed = UndisturbedValidationLoss();
  // Stopped at step 8: its evaluation runs before the save, as it would have undisturbed.
  EXPECT_EQ(ResumedValidationLoss(8, ""), undisturbed);
}

TEST(SessionTest, FailuresSayWhere) {
  {
    SessionConfig config = TinyConfig(TinySpec(2));
    config.make_data = [](int64_t) -> absl::StatusOr<engine::DataSources> {
      return absl::NotFoundError("no data");
    };
    FakeSessionReporter reporter;
    const SessionResult r = RunSession(config, reporter);
    EXPECT_EQ(r.failed_at, SessionStage::kData);
    EXPECT_EQ(reporter.started, 0);
  }
  {
    SessionConfig config = TinyConfig(TinySpec(2));
    FakeSessionReporter reporter;
    reporter.start_status = absl::FailedPreconditionError("tensorboard_dir");
    const SessionResult r = RunSession(config, reporter);
    EXPECT_EQ(r.failed_at, SessionStage::kReporter);
    EXPECT_TRUE(reporter.steps.empty());
  }
  {
    SessionConfig config = TinyConfig(TinySpec(2));
    config.load_path = testutil::MakeTempDir("session") + "/empty";
    FakeSessionReporter reporter;
    const SessionResult r = RunSession(config, reporter);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(reporter.no_checkpoint.size(), 1u);  // from scratch
    EXPECT_EQ(r.iteration, 2);
  }
}

}  // namespace
}  // namespace mt::train
