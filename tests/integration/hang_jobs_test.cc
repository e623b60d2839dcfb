// Hang detection through the whole stack (coordinator/jobs/hang_detector.h): a coordinator,
// two worker daemons and their trainer processes (CPU, Gloo). One rank is SIGSTOPped after a
// checkpoint: the coordinator shows "no progress for N s", marks the job hung within the
// configured floor (naming the stopped rank, its worker and node, and its activity), stops
// the ranks and restarts the job from its latest checkpoint, which then finishes. A rank
// stopped as soon as it is forked (never reaching training) is caught the same way, from the
// placement, the event naming its startup phase.
#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/http.h"
#include "tests/testutil/job_fixture.h"

namespace mt {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// Enough that the job is far from its end when rank 1 stops (at step 12), few enough that the
// rest after the restart is short (~0.15 s a step on a loaded CI core).
constexpr int kIters = 200;
constexpr int kFloorSeconds = 10;

// The children of `parent` (from /proc/PID/stat).
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* d = ::readdir(proc)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(d->d_name, &pid)) continue;
    // Empty when the process is gone (ESRCH mid-read included).
    const std::string stat = mt::ReadFile(absl::StrCat("/proc/", pid, "/stat")).value_or("");
    // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
    pid_t ppid = 0;
    if (f.size() > 1 && absl::SimpleAtoi(f[1], &ppid) && ppid == parent) out.push_back(pid);
  }
  ::closedir(proc);
  return out;
}

class HangJobsTest : public testutil::JobFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(JobFixture::SetUp());
    StartWorkers(2, {}, /*node_per_worker=*/true);
  }
  void TearDown() override {
    // Never leave a stopped process behind.
    if (stopped_ > 0) ::kill(stopped_, SIGKILL);
  }
  pid_t stopped_ = -1;
};

TEST_F(HangJobsTest, AStoppedRankIsFoundWithinTheFloorNamedAndTheJobRestartsAndFinishes) {
  testutil::TinyJob job("hang", data_, kIters);
  job.dp = "2";
  job.log_interval = 1;
  job.sections = {
      absl::StrCat("checkpoint: {save_dir: ", cluster_.dir(), "/ckpt, save_interval: 5}"),
      absl::StrCat("restart: {max_restarts: 2, hang_timeout_floor_seconds: ", kFloorSeconds,
                   ", hang_step_multiplier: 3}")};
  const std::string id = Submit(job.Yaml(), "hang.yaml");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_RUNNING, absl::Minutes(2)))
      << EventText(id);
  mt::v1::Job running;
  for (const absl::Time deadline = absl::Now() + absl::Minutes(2); absl::Now() < deadline;) {
    auto j = cluster_.GetJob(id);
    ASSERT_TRUE(j.ok()) << j.status();
    running = *j;
    if (running.progress().step() >= 12) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GE(running.progress().step(), 12) << EventText(id);
  ASSERT_LT(running.progress().step(), kIters - 50) << "training is too fast for this test";
  ASSERT_EQ(running.placement_size(), 2);
  const std::string worker_id = running.placement(1).worker_id();
  const std::string node = running.placement(1).node();  // = the daemon's name
  const std::vector<pid_t> ranks = ChildrenOf(cluster_.worker(node)->pid());
  ASSERT_EQ(ranks.size(), 1u) << "the trainer of rank 1 under " << node;
  stopped_ = ranks[0];
  ASSERT_EQ(::kill(stopped_, SIGSTOP), 0);
  const absl::Time stopped_at = absl::Now();
  std::fprintf(stderr, "SIGSTOP rank 1 (pid %d on %s) at step %lld\n", stopped_, node.c_str(),
               static_cast<long long>(running.progress().step()));

  // "no progress for N s" before the hang is declared, in the job and in mtctl describe.
  bool shown = false;
  std::string describe;
  absl::Time hung_at = absl::InfiniteFuture();
  for (const absl::Time deadline = stopped_at + absl::Seconds(kFloorSeconds + 20);
       absl::Now() < deadline;) {
    auto j = cluster_.GetJob(id);
    ASSERT_TRUE(j.ok()) << j.status();
    if (j->state() == mt::v1::JOB_STATE_RESTARTING) {
      hung_at = absl::Now();
      break;
    }
    if (!shown && j->progress().no_progress_seconds() >= 5) {
      shown = true;
      EXPECT_THAT(j->progress().no_progress_detail(), HasSubstr("rank 1 on " + worker_id));
      describe = cluster_.Mtctl({"describe", id}).out;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_NE(hung_at, absl::InfiniteFuture()) << EventText(id);
  const double detection = absl::ToDoubleSeconds(hung_at - stopped_at);
  std::fprintf(stderr, "hang detected %.2f s after SIGSTOP (floor %d s)\n", detection,
               kFloorSeconds);
  EXPECT_TRUE(shown) << "no_progress_seconds never reached 5 s before the hang";
  EXPECT_THAT(describe, HasSubstr("no progress for "));
  // The floor (the p99 step time of this tiny job is far below floor / 3: the multiplier is 3,
  // not the default 10, because with 12 steps timed the p99 is the slowest of them, and one
  // step slowed to 2.55 s by a loaded machine once raised the timeout to 25 s), plus the
  // coalescing of beacons and the check period.
  EXPECT_GE(detection, kFloorSeconds - 0.5);
  EXPECT_LE(detection, kFloorSeconds + 3.0);

  const std::vector<mt::v1::JobEvent> events = Transitions(id);
  ASSERT_GE(events.size(), 4u);
  const std::string& reason = events[3].reason();
  EXPECT_EQ(events[3].state(), mt::v1::JOB_STATE_RESTARTING);
  EXPECT_THAT(reason, HasSubstr(absl::StrCat("hung: rank 1 on worker ", worker_id, " (node ", node,
                                             ") made no progress for ")));
  EXPECT_THAT(reason, MatchesRegex(".* in (data|forward|backward|optimizer|collective|save)"
                                   " of step [0-9]+ .*"));
  EXPECT_THAT(reason, HasSubstr("restart 1 of at most 2"));

  // Back to training from the latest checkpoint, then to the end.
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_RUNNING, absl::Minutes(2)))
      << EventText(id);
  auto back = cluster_.GetJob(id);
  ASSERT_TRUE(back.ok());
  if (back->attempt() == 1) {
    std::fprintf(stderr, "training again %.2f s after SIGSTOP\n",
                 absl::ToDoubleSeconds(absl::Now() - stopped_at));
  }
  EXPECT_NE(::kill(stopped_, 0), 0) << "the stopped rank was not ended";
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << EventText(id);
  auto done = cluster_.GetJob(id);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->attempt(), 1);
  EXPECT_EQ(done->progress().step(), kIters);
  EXPECT_GT(done->resume_step(), 0);
  EXPECT_EQ(done->resume_step() % 5, 0);
  std::fprintf(stderr, "%s", EventText(id).c_str());
}

// A rank SIGSTOPped as soon as its process exists never reaches training: the job, SCHEDULED,
// is found hung within the floor of its placement, the event naming the rank, its worker and
// node and its startup phase; it restarts and finishes.
TEST_F(HangJobsTest, ARankStoppedAtItsStartIsFoundWithinTheFloorNamingItsPhase) {
  testutil::TinyJob job("starthang", data_, 20);
  job.dp = "2";
  job.sections = {
      absl::StrCat("checkpoint: {save_dir: ", cluster_.dir(), "/ckpt, save_interval: 5}"),
      absl::StrCat("restart: {max_restarts: 2, hang_timeout_floor_seconds: ", kFloorSeconds, "}")};
  // The first trainer process either daemon forks is stopped at once.
  const std::vector<std::string> nodes = {"w0", "w1"};
  std::string stopped_node;
  absl::Time stopped_at;
  std::thread stopper([&] {
    for (const absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;) {
      for (const std::string& node : nodes) {
        const std::vector<pid_t> ranks = ChildrenOf(cluster_.worker(node)->pid());
        if (ranks.empty() || ::kill(ranks[0], SIGSTOP) != 0) continue;
        stopped_ = ranks[0];
        stopped_node = node;
        stopped_at = absl::Now();
        return;
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
  });
  const std::string id = Submit(job.Yaml(), "starthang.yaml");
  stopper.join();
  ASSERT_GT(stopped_, 0) << "no trainer process appeared";
  ASSERT_TRUE(
      cluster_.WaitForState(id, mt::v1::JOB_STATE_RESTARTING, absl::Seconds(kFloorSeconds + 20)))
      << EventText(id);
  const double detection = absl::ToDoubleSeconds(absl::Now() - stopped_at);
  std::fprintf(stderr, "startup hang detected %.2f s after SIGSTOP (floor %d s)\n", detection,
               kFloorSeconds);
  // The floor from the placement (just before the stop), plus the check period and polling.
  EXPECT_GE(detection, kFloorSeconds - 1.0);
  EXPECT_LE(detection, kFloorSeconds + 3.0);
  const std::vector<mt::v1::JobEvent> events = Transitions(id);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[1].state(), mt::v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(events[2].state(), mt::v1::JOB_STATE_RESTARTING);
  auto placed = cluster_.GetJob(id);
  ASSERT_TRUE(placed.ok());
  int rank = -1;
  for (int r = 0; r < placed->placement_size(); ++r) {
    if (placed->placement(r).node() == stopped_node) rank = r;
  }
  ASSERT_GE(rank, 0);
  EXPECT_THAT(events[2].reason(),
              HasSubstr(absl::StrCat("hung at startup: rank ", rank, " on worker ",
                                     placed->placement(rank).worker_id(), " (node ", stopped_node,
                                     ") did not reach training: ")));
  EXPECT_THAT(events[2].reason(), MatchesRegex(".*: (not started|starting) .*"));
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(3)))
      << EventText(id);
  EXPECT_NE(::kill(stopped_, 0), 0) << "the stopped rank was not ended";
  std::fprintf(stderr, "%s", EventText(id).c_str());
}

// The value of `metric{labels}` in a Prometheus text exposition; nullopt when absent.
std::optional<double> Sample(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, series + " ")) continue;
    double v = 0;
    if (absl::SimpleAtod(line, &v)) return v;
  }
  return std::nullopt;
}

// A slower rank, end to end: rank 1's every forward pass takes 1 s longer (MT_TEST_SLOW_RANK,
// read by the trainer: its daemons inherit it from this process). The coordinator reports it as
// a straggler (an event naming the rank and worker, its mt_job_rank_step_time_ratio above the
// threshold on the coordinator's /metrics); rank 0 is not. The delay is large against the
// model's compute so that a loaded machine (CI runs two tests at once on two cores) cannot blur
// the ratio: with 100 ms rank 0 once read 1.77x rank 1 for 5 steps while a compiler shared its
// cores, and with 400 ms the ratio once read 2.22 where an unloaded run reads about 6.
class StragglerJobsTest : public testutil::JobFixture {
 protected:
  void SetUp() override {
    ::setenv("MT_TEST_SLOW_RANK", "1:1000", 1);
    ASSERT_NO_FATAL_FAILURE(JobFixture::SetUp());
    StartWorkers(2, {}, /*node_per_worker=*/true);
  }
  void TearDown() override { ::unsetenv("MT_TEST_SLOW_RANK"); }
};

TEST_F(StragglerJobsTest, ASlowerRankIsReportedAsAStragglerWithItsRatio) {
  constexpr double kThreshold = 1.5;
  constexpr double kDelaySecondsPerStep = 2 * 1.0;
  testutil::TinyJob job("straggler", data_, 100000);
  job.dp = "2";
  job.log_interval = 1;
  job.sections = {
      absl::StrCat("restart: {straggler_threshold: ", kThreshold, ", straggler_window_steps: 5}")};
  const std::string id = Submit(job.Yaml(), "straggler.yaml");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_RUNNING, absl::Minutes(1)))
      << EventText(id);
  auto running = cluster_.GetJob(id);
  ASSERT_TRUE(running.ok());
  const std::string worker_id = running->placement(1).worker_id();
  const absl::Time start = absl::Now();
  const std::string metrics = CoordinatorMetricsAddress();
  const std::string series =
      absl::StrCat("mt_job_rank_step_time_ratio{job=\"", id, "\",rank=\"1\"}");
  std::optional<double> ratio;
  std::string event;
  const bool seen = testutil::WaitFor(
      [&] {
        for (const mt::v1::JobEvent& e : Events(id)) {
          if (absl::StrContains(e.reason(), "straggler: rank 1 on worker " + worker_id)) {
            event = e.reason();
          }
        }
        auto r = testutil::HttpGet(metrics, "/metrics");
        if (r.ok()) ratio = Sample(r->body, series);
        return !event.empty() && ratio.has_value() && *ratio > kThreshold;
      },
      absl::Seconds(40));
  const double found = absl::ToDoubleSeconds(absl::Now() - start);
  ASSERT_TRUE(seen) << "event: '" << event << "', ratio " << ratio.value_or(-1) << "\n"
                    << EventText(id);
  std::fprintf(stderr, "straggler reported %.2f s after RUNNING: %s; ratio %.2f\n", found,
               event.c_str(), *ratio);
  EXPECT_THAT(event, MatchesRegex(".*computes [0-9.]+x the other ranks' median time per step "
                                  "over its last 5 steps \\(restart.straggler_threshold 1.50\\)"));
  // The ratio in steady state. Rank 1 computes rank 0's compute c plus 2 s per step (two
  // micro-batches), so the ratio is 1 + 2 / c: at least 2 while c <= 2 s (forward and backward
  // of two micro-batches of this model take well under 0.5 s on a loaded CI machine), and at
  // most what c >= 10 ms allows: 1 + 2 / 0.01 = 201. A ratio above 2 is what tells it from the
  // bug this test was written for: a median of the ranks' times that held rank 1 itself read
  // 2 r1 / (r0 + r1), below 2 whatever the slowdown. The step period, printed for the record,
  // is rank 1's compute plus the collectives, data and optimizer.
  auto before = cluster_.GetJob(id);
  ASSERT_TRUE(before.ok());
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Seconds(8));
  auto after = cluster_.GetJob(id);
  ASSERT_TRUE(after.ok());
  const int64_t steps = after->progress().step() - before->progress().step();
  ASSERT_GT(steps, 0) << "the job made no step in 8 s";
  const double period = absl::ToDoubleSeconds(absl::Now() - t0) / static_cast<double>(steps);
  auto r = testutil::HttpGet(metrics, "/metrics");
  ASSERT_TRUE(r.ok());
  ratio = Sample(r->body, series);
  ASSERT_TRUE(ratio.has_value());
  std::fprintf(stderr, "period %.3f s per step, ratio read %.2f\n", period, *ratio);
  // The delay is in effect (without it a step takes ~0.2 s); 0.75x, not 1x: 8 s hold 3 or 4
  // step ends of ~2.2 s, so the period reads down to 8 / 4.
  EXPECT_GT(period, 0.75 * kDelaySecondsPerStep);
  EXPECT_GT(*ratio, 2.0);
  EXPECT_LT(*ratio, 1 + kDelaySecondsPerStep / 0.010);
  for (const mt::v1::JobEvent& e : Events(id)) {
    EXPECT_THAT(e.reason(), ::testing::Not(HasSubstr("straggler: rank 0"))) << EventText(id);
  }
  ASSERT_EQ(cluster_.Mtctl({"cancel", id}).exit_code, 0);
}

}  // namespace
}  // namespace mt
