// `mtctl cancel` of a running job (issue 19): its ranks stop the way a stop signal stops them,
// every rank at the same step, which is saved; the job ends CANCELLED and an event names the
// step saved; a job loading that checkpoint continues with the losses of an undisturbed run,
// bit for bit. `--no-save` kills the ranks at once. Real coordinator, worker daemons and
// trainers (CPU, Gloo), a tiny GPT.
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/job_fixture.h"
#include "tests/testutil/step_losses.h"

namespace mt {
namespace {

using ::testing::HasSubstr;

constexpr int kIters = 30;

class CancelJobsTest : public testutil::JobFixture {
 protected:
  void SetUp() override {
    // Rank 0's forward passes take 40 ms longer (timing only: the numbers are unchanged), so
    // that a step lasts long enough for the test to cancel mid-run.
    ::setenv("MT_TEST_SLOW_RANK", "0:40", 1);
    ASSERT_NO_FATAL_FAILURE(JobFixture::SetUp());
    StartWorkers(2);
  }
  void TearDown() override { ::unsetenv("MT_TEST_SLOW_RANK"); }

  // The spec every job here trains (the same schedule: kIters steps); `checkpoint` is its
  // checkpoint section's body, if any.
  std::string Yaml(const std::string& name, const std::string& checkpoint) {
    testutil::TinyJob job(name, data_, kIters);
    job.dp = "2";
    job.dropout = "0.1";  // the RNG state must resume too
    job.log_interval = 1;
    if (!checkpoint.empty()) job.sections = {absl::StrCat("checkpoint: {", checkpoint, "}")};
    return job.Yaml();
  }

  // Waits until the job reported step `step`; returns the step it reported.
  int64_t WaitForStep(const std::string& id, int64_t step) {
    int64_t seen = 0;
    testutil::WaitFor(
        [&] {
          auto job = cluster_.GetJob(id);
          seen = job.ok() ? job->progress().step() : 0;
          return seen >= step;
        },
        absl::Minutes(2));
    return seen;
  }

  std::map<int, double> RankZeroLosses(const std::string& id) {
    testutil::CommandResult logs = cluster_.Mtctl({"logs", id, "0"});
    EXPECT_EQ(logs.exit_code, 0) << logs.err;
    return testutil::StepLosses(logs.out);
  }

  std::string LastEvent(const std::string& id) {
    const std::vector<mt::v1::JobEvent> events = Events(id);
    return events.empty() ? "" : events.back().reason();
  }
};

TEST_F(CancelJobsTest, CancelSavesTheStopStepAndALoadingJobContinuesExactly) {
  const std::string u = Submit(Yaml("undisturbed", ""), "u.yaml");
  ASSERT_TRUE(cluster_.WaitForState(u, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(3)))
      << EventText(u);
  auto undisturbed = cluster_.GetJob(u);
  ASSERT_TRUE(undisturbed.ok());
  const std::map<int, double> reference = RankZeroLosses(u);
  ASSERT_EQ(reference.size(), static_cast<size_t>(kIters));

  const std::string save = cluster_.dir() + "/ckpt-c";
  const std::string c = Submit(Yaml("cancelled", absl::StrCat("save_dir: ", save)), "c.yaml");
  ASSERT_GE(WaitForStep(c, 4), 4) << EventText(c);
  testutil::CommandResult r = cluster_.Mtctl({"cancel", c, "enough"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("CANCELLED (the ranks save the step they stop at)"));
  ASSERT_TRUE(cluster_.WaitForIdleWorkers(2, absl::Seconds(30))) << EventText(c);
  auto job = cluster_.GetJob(c);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), mt::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job->reason(), "cancelled: enough");
  const int64_t stop = job->progress().step();
  ASSERT_GE(stop, 4);
  ASSERT_LT(stop, kIters) << "the job ended before the cancel";

  // The stop step is saved, committed and in the catalog.
  auto latest = checkpoint::ReadLatest(save);
  ASSERT_TRUE(latest.ok()) << latest.status() << "\n" << EventText(c);
  EXPECT_EQ(*latest, stop);
  EXPECT_EQ(checkpoint::ListCheckpointSteps(save), (std::vector<int64_t>{stop}));
  EXPECT_TRUE(testutil::WaitFor(
      [&] {
        return LastEvent(c) == absl::StrCat("every rank stopped after the cancel at step ", stop,
                                            ": saved step ", stop, " to ", save, "/",
                                            checkpoint::IterationDirName(stop));
      },
      absl::Seconds(10)))
      << EventText(c);
  testutil::CommandResult list = cluster_.Mtctl({"checkpoints", "list", c, "-o", "json"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("CHECKPOINT_STATE_COMPLETE")) << list.out;
  EXPECT_THAT(list.out, HasSubstr(absl::StrCat("\"step\": \"", stop, "\""))) << list.out;

  // A job loading it trains steps stop+1..kIters with the undisturbed run's losses.
  const std::string d = Submit(
      Yaml("resumed", absl::StrCat("load_dir: ", save, ", save_dir: ", cluster_.dir(), "/ckpt-d")),
      "d.yaml");
  ASSERT_TRUE(cluster_.WaitForState(d, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(3)))
      << EventText(d);
  auto resumed = cluster_.GetJob(d);
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->progress().loss(), undisturbed->progress().loss());  // bit for bit
  const std::map<int, double> losses = RankZeroLosses(d);
  ASSERT_EQ(losses.size(), static_cast<size_t>(kIters - stop));
  for (const auto& [step, loss] : losses) {
    ASSERT_GT(step, stop);
    EXPECT_EQ(loss, reference.at(step)) << "step " << step;
  }
}

TEST_F(CancelJobsTest, NoSaveKillsTheRanksAtOnce) {
  const std::string save = cluster_.dir() + "/ckpt-n";
  const std::string n = Submit(Yaml("nosave", absl::StrCat("save_dir: ", save)), "n.yaml");
  ASSERT_GE(WaitForStep(n, 3), 3) << EventText(n);
  testutil::CommandResult r = cluster_.Mtctl({"cancel", n, "--no-save"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, absl::StrCat(n, " CANCELLED\n"));
  ASSERT_TRUE(cluster_.WaitForIdleWorkers(2, absl::Seconds(10))) << EventText(n);
  EXPECT_TRUE(checkpoint::ListCheckpointSteps(save).empty());
  EXPECT_FALSE(checkpoint::ReadLatest(save).ok());
  EXPECT_TRUE(testutil::WaitFor(
      [&] { return absl::StrContains(LastEvent(n), ": not saved (cancelled with no_save)"); },
      absl::Seconds(10)))
      << EventText(n);
}

}  // namespace
}  // namespace mt
