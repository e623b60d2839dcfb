// RankProcess with real child processes: /bin/sh scripts stand in for mt-train (they see the
// same arguments, environment and report pipe), so the supervision is tested without LibTorch.
#include "worker/daemon/rank_process.h"

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::worker {
namespace {

using ::testing::HasSubstr;

// Collects what the process reports; callbacks arrive on the process's own threads.
class Recorder {
 public:
  RankProcess::ReportFn OnReport() {
    return [this](const mt::v1::RankReport& r) {
      absl::MutexLock lock(&mu_);
      reports_.push_back(r);
    };
  }
  RankProcess::ExitFn OnExit() {
    return [this](const mt::v1::RankExitReport& r) {
      absl::MutexLock lock(&mu_);
      exits_.push_back(r);
    };
  }
  std::vector<mt::v1::RankReport> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  // The one exit report, once it has arrived.
  mt::v1::RankExitReport WaitForExit() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(
        absl::Condition(
            +[](std::vector<mt::v1::RankExitReport>* e) { return !e->empty(); }, &exits_),
        absl::Seconds(30));
    EXPECT_EQ(exits_.size(), 1u);
    return exits_.empty() ? mt::v1::RankExitReport() : exits_.front();
  }

 private:
  absl::Mutex mu_;
  std::vector<mt::v1::RankReport> reports_ ABSL_GUARDED_BY(mu_);
  std::vector<mt::v1::RankExitReport> exits_ ABSL_GUARDED_BY(mu_);
};

class RankProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::MakeTempDir("rank_process");
    assignment_.set_job_id("job-1");
    assignment_.set_attempt(2);
    assignment_.mutable_coordinates()->set_rank(3);
    assignment_.set_gpu_index(-1);
  }

  // A trainer that runs `body` under /bin/sh.
  RankProcessOptions Trainer(const std::string& body) {
    const std::string path = dir_ + "/trainer.sh";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0755);
    RankProcessOptions options;
    options.trainer_binary = path;
    options.work_dir = dir_ + "/work";
    return options;
  }

  std::unique_ptr<RankProcess> Start(const RankProcessOptions& options) {
    auto p = RankProcess::Start(assignment_, "worker-7", options, recorder_.OnReport(),
                                recorder_.OnExit());
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *std::move(p) : nullptr;
  }

  std::string dir_;
  mt::v1::Assignment assignment_;
  Recorder recorder_;
};

TEST_F(RankProcessTest, ForwardsReportsAndSucceeds) {
  RankProcessOptions options = Trainer(
      // The daemon's contract with mt-train: --assignment FILE, the report pipe on fd 3.
      "[ \"$1\" = --assignment ] && [ -s \"$2\" ] || exit 9\n"
      "[ \"$MT_REPORT_FD\" = 3 ] && [ \"$EXTRA\" = yes ] || exit 8\n"
      // One frame: length 2, then RankReport{phase: RANK_PHASE_TRAINING}.
      "printf '\\002\\000\\000\\000\\050\\002' >&3\n"
      "echo trained");
  options.extra_env.push_back("EXTRA=yes");
  auto p = Start(options);
  ASSERT_NE(p, nullptr);
  const mt::v1::RankExitReport exit = recorder_.WaitForExit();
  EXPECT_EQ(exit.outcome(), mt::v1::RANK_OUTCOME_SUCCEEDED) << exit.message();
  EXPECT_EQ(exit.exit_status(), 0);
  EXPECT_EQ(exit.job_id(), "job-1");
  EXPECT_EQ(exit.worker_id(), "worker-7");
  EXPECT_THAT(exit.log_tail(), ::testing::Contains("trained"));
  const std::vector<mt::v1::RankReport> reports = recorder_.reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].phase(), mt::v1::RANK_PHASE_TRAINING);
  // The daemon, not the trainer, says who reports.
  EXPECT_EQ(reports[0].worker_id(), "worker-7");
  EXPECT_EQ(reports[0].job_id(), "job-1");
  EXPECT_EQ(reports[0].attempt(), 2);
  EXPECT_EQ(reports[0].rank(), 3);
  EXPECT_TRUE(p->exited());
}

TEST_F(RankProcessTest, FailureCarriesTheLogsLastLine) {
  auto p = Start(Trainer("echo 'mt-train: training: out of memory' >&2\nexit 1"));
  ASSERT_NE(p, nullptr);
  const mt::v1::RankExitReport exit = recorder_.WaitForExit();
  EXPECT_EQ(exit.outcome(), mt::v1::RANK_OUTCOME_FAILED);
  EXPECT_EQ(exit.exit_status(), 1);
  EXPECT_EQ(exit.message(), "exit code 1: mt-train: training: out of memory");
}

TEST_F(RankProcessTest, StopEndsTheRankAsStopped) {
  auto p = Start(Trainer("trap 'echo stopping; exit 143' TERM\nwhile :; do sleep 0.05; done"));
  ASSERT_NE(p, nullptr);
  absl::SleepFor(absl::Milliseconds(200));  // the trap is set
  p->Stop(absl::Seconds(20));
  const mt::v1::RankExitReport exit = recorder_.WaitForExit();
  EXPECT_EQ(exit.outcome(), mt::v1::RANK_OUTCOME_STOPPED);
  EXPECT_EQ(exit.exit_status(), 143);
}

TEST_F(RankProcessTest, StopKillsATrainerThatIgnoresSigterm) {
  auto p = Start(Trainer("trap '' TERM\nwhile :; do sleep 0.05; done"));
  ASSERT_NE(p, nullptr);
  absl::SleepFor(absl::Milliseconds(200));
  p->Stop(absl::Milliseconds(300));
  const mt::v1::RankExitReport exit = recorder_.WaitForExit();
  EXPECT_EQ(exit.outcome(), mt::v1::RANK_OUTCOME_STOPPED);
  EXPECT_EQ(exit.exit_status(), -9);
}

TEST_F(RankProcessTest, MissingTrainerFailsWithExitCode127) {
  RankProcessOptions options = Trainer("exit 0");
  options.trainer_binary = dir_ + "/no-such-trainer";
  auto p = Start(options);
  ASSERT_NE(p, nullptr);
  const mt::v1::RankExitReport exit = recorder_.WaitForExit();
  EXPECT_EQ(exit.outcome(), mt::v1::RANK_OUTCOME_FAILED);
  EXPECT_EQ(exit.exit_status(), 127);
  EXPECT_THAT(exit.message(), HasSubstr("exec of the trainer failed"));
}

TEST_F(RankProcessTest, WorkDirThatCannotBeMadeIsAnError) {
  RankProcessOptions options = Trainer("exit 0");
  options.work_dir = dir_ + "/trainer.sh/under-a-file";
  auto p = RankProcess::Start(assignment_, "worker-7", options, recorder_.OnReport(),
                              recorder_.OnExit());
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("work dir " + options.work_dir));
}

TEST(TailLinesTest, LastLinesOfAFile) {
  const std::string path = testutil::MakeTempDir("tail") + "/log";
  std::ofstream(path) << "a\nb\nc\n";
  EXPECT_THAT(TailLines(path, 2), ::testing::ElementsAre("b", "c"));
  EXPECT_THAT(TailLines(path, 10), ::testing::ElementsAre("a", "b", "c"));
  EXPECT_TRUE(TailLines(path + "-missing", 2).empty());
}

}  // namespace
}  // namespace mt::worker
