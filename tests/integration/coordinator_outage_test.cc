// A coordinator outage through the whole stack (issue 19): real coordinator, worker daemons and
// trainer processes (CPU, Gloo), the tiny GPT of job_fixture.h.
//  - a save that falls inside the outage commits (the ranks meet in the job's own store), the
//    job trains on without a restart, and the restarted coordinator's catalog lists the save
//    (the daemons keep the save reports until it is back);
//  - ranks that end during the outage are reported once it is back, and the job succeeds;
//  - mt-worker stops within seconds of SIGTERM, its rank with it, while its coordinator is
//    stopped (SIGSTOP) or was never there (a closed port).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testutil/job_fixture.h"

namespace mt {
namespace {

using ::testing::HasSubstr;

// About 0.2 s a step on a loaded CI core: the outage (to the first save, then at least 25 s)
// lasts ~25 s, the whole job ~40 s, its second save after the coordinator is back (on an idle
// machine, at ~0.1 s a step, it can come within the outage: the test holds either way).
constexpr int kIters = 200;
constexpr int kSaveInterval = 100;

std::string JobYaml(const std::string& name, const std::string& data, const std::string& save,
                    int iters = kIters) {
  testutil::TinyJob job(name, data, iters);
  job.dp = "2";
  job.log_interval = 1;
  job.sections = {
      absl::StrCat("checkpoint: {save_dir: ", save, ", save_interval: ", kSaveInterval, "}"),
      "restart: {max_restarts: 0}"};
  return job.Yaml();
}

// Pids of the processes whose command line mentions `needle` (the rank processes of a worker
// name their assignment file under its work_dir).
std::vector<int> ProcessesMentioning(const std::string& needle) {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = mt::ReadFile(e.path() / "cmdline").value_or("");
    if (cmdline.find(needle) != std::string::npos && std::stoi(name) != ::getpid()) {
      out.push_back(std::stoi(name));
    }
  }
  return out;
}

class CoordinatorOutageTest : public testutil::JobFixture {
 protected:
  // Waits until the job has trained `step` steps (false at the timeout or an end).
  bool WaitForStep(const std::string& id, int64_t step) {
    const absl::Time deadline = absl::Now() + absl::Minutes(3);
    while (absl::Now() < deadline) {
      auto job = cluster_.GetJob(id);
      if (job.ok() && job->progress().step() >= step) return true;
      if (job.ok() && job->state() != mt::v1::JOB_STATE_RUNNING &&
          job->state() != mt::v1::JOB_STATE_SCHEDULED &&
          job->state() != mt::v1::JOB_STATE_PENDING) {
        return false;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  // Steps of the job's catalog entries that are not WRITING (`mtctl -o json checkpoints list`).
  std::vector<int64_t> Catalog(const std::string& id) {
    testutil::CommandResult r = cluster_.Mtctl({"-o", "json", "checkpoints", "list", id});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    mt::v1::ListCheckpointsResponse list;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &list).ok()) << r.out;
    std::vector<int64_t> steps;
    for (const auto& c : list.checkpoints()) {
      if (c.state() != mt::v1::CHECKPOINT_STATE_WRITING) steps.push_back(c.step());
    }
    std::sort(steps.begin(), steps.end());
    return steps;
  }

  // Seconds until `workers` workers are registered again (IDLE or BUSY: their rank may have
  // ended during the outage), -1 at the timeout.
  double SecondsToReRegistration(int workers) {
    const absl::Time start = absl::Now();
    const bool back = testutil::WaitFor(
        [&] {
          auto list = cluster_.ListWorkers();
          if (!list.ok()) return false;
          int live = 0;
          for (const auto& w : list->workers()) {
            live +=
                w.state() == mt::v1::WORKER_STATE_BUSY || w.state() == mt::v1::WORKER_STATE_IDLE;
          }
          return live == workers;
        },
        absl::Seconds(30));
    return back ? absl::ToDoubleSeconds(absl::Now() - start) : -1;
  }
};

// Before: the ranks met through the coordinator's rendezvous to commit a save, so the save that
// fell inside the outage failed ("saving the checkpoint: failed to connect") and so did the job.
// Then: the save committed, but the daemons came back as late after the coordinator's return
// as it had been away (gRPC's reconnect backoff, growing to 120 s; their failing Register calls
// did not keep the channel trying): 10.8 s after a 10.5 s outage; after a longer one, later
// than its orphan check (lost_after + 10 s), which failed the job ("worker w-1 no longer runs
// rank 0").
TEST_F(CoordinatorOutageTest, ASaveDuringAnOutageCommitsAndReachesTheCatalogAfterwards) {
  StartWorkers(2);
  const std::string save = cluster_.dir() + "/ckpt";
  const std::string id = Submit(JobYaml("outage", data_, save), "outage.yaml");
  ASSERT_TRUE(WaitForStep(id, 3)) << EventText(id);
  auto before = cluster_.GetJob(id);
  ASSERT_TRUE(before.ok());
  ASSERT_LT(before->progress().step(), kSaveInterval) << "the first save came before the outage";
  const absl::Time down = absl::Now();
  cluster_.KillCoordinator(SIGKILL);
  // While it is away, the ranks train on and commit a save (latest moves) by themselves.
  const absl::Time deadline = absl::Now() + absl::Minutes(3);
  int64_t latest = -1;
  while (absl::Now() < deadline) {
    auto l = checkpoint::ReadLatest(save);
    if (l.ok() && *l >= kSaveInterval) {
      latest = *l;
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GE(latest, kSaveInterval) << cluster_.Log("w0.log") << cluster_.Log("w1.log");
  // Away long enough for gRPC's default reconnect backoff to have grown past 5 s.
  const absl::Duration kMinOutage = absl::Seconds(25);
  if (absl::Now() - down < kMinOutage) absl::SleepFor(kMinOutage - (absl::Now() - down));
  ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Log("coordinator.log");
  const double outage = absl::ToDoubleSeconds(absl::Now() - down);
  const double back = SecondsToReRegistration(2);
  std::fprintf(stderr,
               "coordinator down %.1f s across the save of step %ld; workers back %.2f s "
               "after its restart\n",
               outage, static_cast<long>(latest), back);
  // Well inside the orphan check's grace (lost_after + 10 s = 12 s here).
  EXPECT_GE(back, 0) << cluster_.Log("w0.log") << cluster_.Log("w1.log");
  EXPECT_LT(back, 5) << cluster_.Log("w0.log") << cluster_.Log("w1.log");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << EventText(id) << cluster_.Log("coordinator.log");
  auto job = cluster_.GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->attempt(), 0) << EventText(id);  // no restart
  EXPECT_EQ(job->progress().step(), kIters);
  EXPECT_EQ(States(id),
            (std::vector<mt::v1::JobState>{mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_SCHEDULED,
                                           mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_SUCCEEDED}))
      << EventText(id);
  // Every save is in the catalog, those of the outage included (reports may trail the exit).
  std::vector<int64_t> expected;
  for (int64_t s = kSaveInterval; s <= kIters; s += kSaveInterval) expected.push_back(s);
  EXPECT_EQ(checkpoint::ListCheckpointSteps(save), expected);
  std::vector<int64_t> catalog;
  testutil::WaitFor(
      [&] {
        catalog = Catalog(id);
        return catalog == expected;
      },
      absl::Seconds(20));
  EXPECT_EQ(catalog, expected) << cluster_.Log("coordinator.log");
  EXPECT_THAT(catalog, ::testing::Contains(latest));
}

// A guard (it passed before too, at this outage's length): the exit reports of ranks that ended
// during the outage reach the coordinator once it is back, before its orphan check, so the job
// succeeds. The refusal of a restarting coordinator is worker/daemon/agent_exit_test.cc's.
TEST_F(CoordinatorOutageTest, RanksThatEndDuringAnOutageAreReportedWhenTheCoordinatorIsBack) {
  StartWorkers(2);
  const std::string save = cluster_.dir() + "/ckpt-end";
  const std::string id =
      Submit(JobYaml("ends", data_, save, kSaveInterval), "ends.yaml");  // ends at its save
  ASSERT_TRUE(WaitForStep(id, 3)) << EventText(id);
  cluster_.KillCoordinator(SIGKILL);
  // The job trains to its end while the coordinator is away; its ranks exit.
  const bool ended = testutil::WaitFor(
      [&] {
        return ProcessesMentioning(cluster_.dir() + "/w0/").empty() &&
               ProcessesMentioning(cluster_.dir() + "/w1/").empty();
      },
      absl::Minutes(3));
  ASSERT_TRUE(ended) << cluster_.Log("w0.log") << cluster_.Log("w1.log");
  EXPECT_EQ(checkpoint::ReadLatest(save).value_or(-1), kSaveInterval);
  absl::SleepFor(absl::Seconds(5));  // the reports' retries back off
  ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Log("coordinator.log");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_SUCCEEDED, absl::Seconds(30)))
      << EventText(id) << cluster_.Log("coordinator.log") << cluster_.Log("w0.log");
  auto job = cluster_.GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->attempt(), 0) << EventText(id);
  EXPECT_EQ(job->progress().step(), kSaveInterval);
  std::vector<int64_t> catalog;
  testutil::WaitFor(
      [&] {
        catalog = Catalog(id);
        return catalog == std::vector<int64_t>{kSaveInterval};
      },
      absl::Seconds(20));
  EXPECT_EQ(catalog, std::vector<int64_t>{kSaveInterval}) << cluster_.Log("coordinator.log");
}

// Stops `name` with SIGTERM; expects it gone within 5 s with its goodbye in the log.
void ExpectStopsWithinSeconds(testutil::Cluster& cluster, const std::string& name) {
  const absl::Time start = absl::Now();
  cluster.worker(name)->Signal(SIGTERM);
  auto code = cluster.worker(name)->Wait(absl::Seconds(5));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ASSERT_TRUE(code.ok()) << name << " still runs 5 s after SIGTERM\n" << cluster.Log(name + ".log");
  std::fprintf(stderr, "%s stopped %.2f s after SIGTERM\n", name.c_str(), seconds);
  EXPECT_EQ(*code, 0) << cluster.Log(name + ".log");
  EXPECT_THAT(cluster.Log(name + ".log"), HasSubstr("] stopped"));
}

// Before: a heartbeat in flight (5 s), the deregistration (2 s) and the exit report's retries (a
// minute) each waited for the stopped coordinator: 14 s and more.
TEST_F(CoordinatorOutageTest, AWorkerStopsWithinSecondsOfSigtermWhileItsCoordinatorIsStopped) {
  StartWorkers(2);
  const std::string id =
      Submit(JobYaml("stopped", data_, cluster_.dir() + "/ckpt-s"), "stopped.yaml");
  ASSERT_TRUE(WaitForStep(id, 3)) << EventText(id);
  const std::string ranks_of_w0 = cluster_.dir() + "/w0/";
  ASSERT_FALSE(ProcessesMentioning(ranks_of_w0).empty()) << "no rank runs on w0";
  cluster_.coordinator()->Signal(SIGSTOP);
  absl::SleepFor(absl::Seconds(1.5));  // a heartbeat is in flight
  ExpectStopsWithinSeconds(cluster_, "w0");
  EXPECT_THAT(ProcessesMentioning(ranks_of_w0), ::testing::IsEmpty());  // no orphan rank
  cluster_.coordinator()->Signal(SIGCONT);
}

TEST_F(CoordinatorOutageTest, AWorkerWhoseCoordinatorNeverAnswersStopsWithinSeconds) {
  // A port nothing listens on (bound, then closed).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  ASSERT_TRUE(cluster_
                  .StartWorker("orphan", "node0",
                               {absl::StrCat("--coordinator=127.0.0.1:", ntohs(addr.sin_port))})
                  .ok());
  absl::SleepFor(absl::Seconds(1.5));  // it retries registering
  ExpectStopsWithinSeconds(cluster_, "orphan");
}

}  // namespace
}  // namespace mt
