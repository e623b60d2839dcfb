// A worker daemon stopped with SIGTERM (systemctl stop, scancel, a drain) mid-job: its ranks
// get SIGTERM, stop between steps and save a checkpoint before the daemon exits; none is
// killed. Real coordinator, worker daemons and trainers (CPU, Gloo), a tiny GPT.
#include <csignal>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/job_fixture.h"

namespace mt {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class WorkerStopTest : public testutil::JobFixture {};

TEST_F(WorkerStopTest, SigtermToTheWorkersLetsTheirRanksSave) {
  StartWorkers(2);
  const std::string save = absl::StrCat(cluster_.dir(), "/ckpt");
  testutil::TinyJob job("stopped", data_, 100000);
  job.dp = "2";
  job.log_interval = 1;
  job.sections = {absl::StrCat("checkpoint: {save_dir: ", save, "}")};
  const std::string id = Submit(job.Yaml(), "stopped.yaml");
  int64_t step = 0;
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        auto j = cluster_.GetJob(id);
        step = j.ok() ? j->progress().step() : 0;
        return step >= 3;
      },
      absl::Minutes(2)))
      << EventText(id);

  for (const char* w : {"w0", "w1"}) cluster_.worker(w)->Signal(SIGTERM);
  for (const char* w : {"w0", "w1"}) {
    auto code = cluster_.worker(w)->Wait(absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << w << " did not exit within 30 s of SIGTERM";
    EXPECT_EQ(*code, 0) << cluster_.Log(absl::StrCat(w, ".log"));
    const std::string log = cluster_.Log(absl::StrCat(w, ".log"));
    EXPECT_THAT(log, Not(HasSubstr("killed by signal"))) << log;
    EXPECT_THAT(log, HasSubstr("exit code 143")) << log;
  }
  // Both ranks stopped at the same step, at or after the one reported, and saved it.
  auto latest = checkpoint::ReadLatest(save);
  ASSERT_TRUE(latest.ok()) << latest.status() << "\n" << EventText(id);
  EXPECT_GE(*latest, step);
}

}  // namespace
}  // namespace mt
