// Automatic restart through the whole stack (coordinator/jobs/restart_policy.h): real
// coordinator, worker daemons and trainer processes (CPU, Gloo), a tiny GPT on a small
// repetitive dataset.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/job_fixture.h"

namespace mt {
namespace {

using ::testing::HasSubstr;

constexpr int kIters = 24;

std::string JobYaml(const std::string& name, const std::string& data, const std::string& save,
                    int max_restarts = 3) {
  testutil::TinyJob job(name, data, kIters);
  job.dp = "2";
  job.dropout = "0.1";
  job.log_interval = 1;
  job.sections = {absl::StrCat("checkpoint: {save_dir: ", save, ", save_interval: 4}"),
                  absl::StrCat("restart: {max_restarts: ", max_restarts, "}")};
  return job.Yaml();
}

class RestartJobsTest : public testutil::JobFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(JobFixture::SetUp());
    // One node per worker: a placement names the daemon to kill.
    StartWorkers(3, {}, /*node_per_worker=*/true);
  }
};

// The fault test: kill -9 of a worker daemon (its rank dies with it) at a random step.
// The job restarts by itself from its latest checkpoint, on the two workers left, and ends with
// exactly (fp32, CPU, same layout) the final loss of an undisturbed run of the same spec.
TEST_F(RestartJobsTest, AKilledWorkerRestartsTheJobWhichEndsWithTheUndisturbedLoss) {
  const std::string a = Submit(JobYaml("undisturbed", data_, cluster_.dir() + "/ckpt-a"), "a.yaml");
  ASSERT_TRUE(cluster_.WaitForState(a, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << EventText(a);
  auto undisturbed = cluster_.GetJob(a);
  ASSERT_TRUE(undisturbed.ok());
  ASSERT_EQ(undisturbed->progress().step(), kIters);
  ASSERT_EQ(undisturbed->attempt(), 0);

  std::random_device device;
  const unsigned seed = device();
  std::mt19937 rng(seed);
  const int kill_at = std::uniform_int_distribution<int>(2, kIters - 6)(rng);
  const std::string b = Submit(JobYaml("disturbed", data_, cluster_.dir() + "/ckpt-b"), "b.yaml");
  SCOPED_TRACE(absl::StrCat("seed ", seed, ": kill at step ", kill_at));
  std::fprintf(stderr, "killing a worker of %s at step %d (seed %u)\n", b.c_str(), kill_at, seed);
  ASSERT_TRUE(cluster_.WaitForState(b, mt::v1::JOB_STATE_RUNNING, absl::Minutes(2)))
      << EventText(b);
  mt::v1::Job running;
  const absl::Time deadline = absl::Now() + absl::Minutes(3);
  while (absl::Now() < deadline) {
    auto job = cluster_.GetJob(b);
    ASSERT_TRUE(job.ok()) << job.status();
    running = *job;
    if (running.progress().step() >= kill_at) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GE(running.progress().step(), kill_at);
  ASSERT_LT(running.progress().step(), kIters) << "the job ran out before the kill";
  ASSERT_EQ(running.placement_size(), 2);
  const int victim_rank = std::uniform_int_distribution<int>(0, 1)(rng);
  const std::string victim = running.placement(victim_rank).node();  // node = worker name
  std::fprintf(stderr, "kill -9 %s (rank %d) at step %lld\n", victim.c_str(), victim_rank,
               static_cast<long long>(running.progress().step()));
  cluster_.worker(victim)->Signal(SIGKILL);

  ASSERT_TRUE(cluster_.WaitForState(b, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << EventText(b) << cluster_.Log("coordinator.log");
  auto job = cluster_.GetJob(b);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->attempt(), 1) << EventText(b);
  EXPECT_EQ(job->progress().step(), kIters);
  EXPECT_EQ(job->progress().loss(), undisturbed->progress().loss()) << EventText(b);  // exactly
  for (const auto& p : job->placement()) EXPECT_NE(p.node(), victim);
  // RUNNING -> RESTARTING (the cause) -> PENDING (from which checkpoint) -> ... -> SUCCEEDED.
  const std::vector<mt::v1::JobState> states = States(b);
  ASSERT_GE(states.size(), 7u) << EventText(b);
  EXPECT_EQ(std::vector<mt::v1::JobState>(states.begin(), states.begin() + 3),
            (std::vector<mt::v1::JobState>{mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_SCHEDULED,
                                           mt::v1::JOB_STATE_RUNNING}));
  EXPECT_EQ(states[3], mt::v1::JOB_STATE_RESTARTING) << EventText(b);
  EXPECT_EQ(states[4], mt::v1::JOB_STATE_PENDING) << EventText(b);
  EXPECT_EQ(states.back(), mt::v1::JOB_STATE_SUCCEEDED);
  const std::vector<mt::v1::JobEvent> events = Transitions(b);
  EXPECT_THAT(events[3].reason(), HasSubstr("restart 1 of at most 3"));
  EXPECT_EQ(events[4].attempt(), 1);
  // The restart resumed from the newest checkpoint saved before the kill (step 4k <= the kill
  // step), or from scratch when the kill came before the first save.
  const int64_t resumed = job->resume_step();
  EXPECT_EQ(resumed % 4, 0);
  EXPECT_LT(resumed, kIters);
  if (resumed > 0) {
    EXPECT_THAT(events[4].reason(),
                HasSubstr(absl::StrCat("restart 1 from ", cluster_.dir(), "/ckpt-b/",
                                       checkpoint::IterationDirName(resumed))));
    EXPECT_EQ(job->resume_from(),
              absl::StrCat(cluster_.dir(), "/ckpt-b/", checkpoint::IterationDirName(resumed)));
  } else {
    EXPECT_THAT(events[4].reason(), HasSubstr("from scratch"));
  }
  auto latest = checkpoint::ReadLatest(cluster_.dir() + "/ckpt-b");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, kIters);
  std::fprintf(stderr, "%s", EventText(b).c_str());
}

// A job that fails at start every time (its data is missing) and saves no checkpoint: the
// first failure restarts it from scratch; after the second (its ranks stopped, save_dir looked
// at again) it fails with the reason instead of looping.
TEST_F(RestartJobsTest, AJobFailingAgainWithoutANewCheckpointFailsWithTheReason) {
  const std::string id =
      Submit(JobYaml("doomed", cluster_.dir() + "/missing", cluster_.dir() + "/ckpt"), "d.yaml");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_FAILED, absl::Minutes(3)))
      << EventText(id);
  auto job = cluster_.GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->attempt(), 1);
  EXPECT_THAT(job->reason(), HasSubstr("failed: exit code 1"));
  EXPECT_THAT(job->reason(),
              HasSubstr("not restarted: failed again with no new checkpoint since restart 1"));
  EXPECT_EQ(States(id),
            (std::vector<mt::v1::JobState>{mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_SCHEDULED,
                                           mt::v1::JOB_STATE_RESTARTING, mt::v1::JOB_STATE_PENDING,
                                           mt::v1::JOB_STATE_SCHEDULED,
                                           mt::v1::JOB_STATE_RESTARTING, mt::v1::JOB_STATE_FAILED}))
      << EventText(id);
  EXPECT_TRUE(cluster_.WaitForIdleWorkers(3, absl::Seconds(20)));
}

// restart.max_restarts: 0 turns restarts off: the first failure fails the job.
TEST_F(RestartJobsTest, MaxRestartsZeroFailsAtTheFirstFailure) {
  const std::string id = Submit(
      JobYaml("once", cluster_.dir() + "/missing", cluster_.dir() + "/ckpt", /*max_restarts=*/0),
      "o.yaml");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_FAILED, absl::Minutes(3)))
      << EventText(id);
  auto job = cluster_.GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->attempt(), 0);
  EXPECT_THAT(job->reason(), HasSubstr("not restarted: restart.max_restarts is 0"));
  EXPECT_EQ(States(id),
            (std::vector<mt::v1::JobState>{mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_SCHEDULED,
                                           mt::v1::JOB_STATE_FAILED}))
      << EventText(id);
}

}  // namespace
}  // namespace mt
