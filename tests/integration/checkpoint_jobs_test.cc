// Checkpoints through the whole stack: real coordinator, worker daemons and trainer processes
// (CPU, Gloo), a tiny GPT on a small repetitive dataset.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/http.h"
#include "tests/testutil/job_fixture.h"

namespace mt {
namespace {

using ::testing::IsEmpty;

std::string JobYaml(const std::string& name, const std::string& data, int iters,
                    const std::string& checkpoint) {
  testutil::TinyJob job(name, data, iters);
  job.dp = "2";
  job.dropout = "0.1";
  job.log_interval = 3;
  job.sections = {"checkpoint: " + checkpoint};
  return job.Yaml();
}

class CheckpointJobsTest : public testutil::JobFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(JobFixture::SetUp());
    // The ranks' metrics stay on the workers' endpoints after the jobs end, for the checks.
    StartWorkers(2, {"--metrics_linger=10m"});
  }

  // The value of `metric` for each rank of job `id`, from every worker's /metrics, by rank.
  std::map<std::string, double> RankValues(const std::string& metric, const std::string& id) {
    std::map<std::string, double> out;
    auto workers = cluster_.ListWorkers();
    EXPECT_TRUE(workers.ok()) << workers.status();
    if (!workers.ok()) return out;
    for (const auto& w : workers->workers()) {
      auto r = testutil::HttpGet(w.metrics_address(), "/metrics");
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) continue;
      for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
        if (!absl::StartsWith(line, metric + "{") ||
            !absl::StrContains(line, absl::StrCat("job=\"", id, "\""))) {
          continue;
        }
        const size_t at = line.find("rank=\"");
        const size_t space = line.rfind(' ');
        double v = 0;
        if (at == absl::string_view::npos || space == absl::string_view::npos ||
            !absl::SimpleAtod(line.substr(space + 1), &v)) {
          ADD_FAILURE() << "unexpected line: " << line;
          continue;
        }
        const size_t end = line.find('"', at + 6);
        out[std::string(line.substr(at + 6, end - at - 6))] = v;
      }
    }
    return out;
  }

  double FinalLoss(const std::string& id) {
    auto job = cluster_.GetJob(id);
    return job.ok() ? job->progress().loss() : std::nan("");
  }
};

// A save that fails (the save_dir is a regular file: no directory can be made in it) fails its
// rank; the coordinator counts it once for the job (mt_coordinator_checkpoint_save_failures_total,
// what the MtCheckpointSaveFailed alert watches) and names step, rank and error in an event.
TEST_F(CheckpointJobsTest, AFailedSaveIsCountedAndNamedInTheJobsEvents) {
  const std::string save_dir = cluster_.dir() + "/not-a-directory";
  ASSERT_EQ(std::system(("echo x > " + save_dir).c_str()), 0);
  const std::string id =
      Submit(JobYaml("badsave", data_, 12, "{save_dir: " + save_dir + ", save_interval: 4}") +
                 "restart: {max_restarts: 0}\n",
             "badsave.yaml");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_FAILED, absl::Minutes(2)))
      << EventText(id);
  const std::string events = EventText(id);
  EXPECT_THAT(events, ::testing::ContainsRegex("checkpoint save of step 4 failed on rank [01] "
                                               "\\(w-[0-9]+\\): "));
  const std::string metrics = CoordinatorMetricsAddress();
  ASSERT_FALSE(metrics.empty());
  auto r = testutil::HttpGet(metrics, "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->body, ::testing::HasSubstr("\nmt_coordinator_checkpoint_save_failures_total 1\n"))
      << events;
}

// A job saving every 4 steps over two DP ranks; a second job resumes from its step-8
// checkpoint and ends with exactly the loss of the first job's step 12.
TEST_F(CheckpointJobsTest, SavedJobResumesWithTheSameLosses) {
  const std::string save = cluster_.dir() + "/ckpt";
  const std::string a = Submit(
      JobYaml("straight", data_, 12, absl::StrCat("{save_dir: ", save, ", save_interval: 4}")),
      "a.yaml");
  ASSERT_TRUE(cluster_.WaitForState(a, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << cluster_.Log("w0.log");
  EXPECT_EQ(checkpoint::ListCheckpointSteps(save), (std::vector<int64_t>{4, 8, 12}));
  auto latest = checkpoint::ReadLatest(save);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, 12);
  auto choice = checkpoint::ChooseCheckpoint(save);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_THAT(choice->problems, IsEmpty());
  EXPECT_EQ(choice->manifest.files_size(), 1);  // DP rank 1 holds the same state
  EXPECT_EQ(choice->manifest.trainer().consumed_samples(), 96);
  const double straight = FinalLoss(a);
  // Steps 4 and 8 are not log steps (log_interval 3): their manifests still hold the loss.
  for (const char* step : {"/iter_0000004", "/iter_0000008"}) {
    auto m = checkpoint::ReadManifest(save + step);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_TRUE(std::isfinite(m->loss()) && m->loss() > 0) << step << ": " << m->loss();
  }
  auto m8 = checkpoint::ReadManifest(save + "/iter_0000008");
  ASSERT_TRUE(m8.ok());
  int64_t bytes8 = 0;
  for (const auto& f : m8->files()) bytes8 += f.size_bytes();
  ASSERT_GT(bytes8, 0);
  // A job that loaded nothing reports no load.
  for (const auto& [rank, count] : RankValues("mt_rank_checkpoint_load_seconds_count", a)) {
    EXPECT_EQ(count, 0) << "rank " << rank;
  }

  const std::string b =
      Submit(JobYaml("resumed", data_, 12,
                     absl::StrCat("{load_dir: ", save, "/iter_0000008, save_dir: ", cluster_.dir(),
                                  "/ckpt2}")),
             "b.yaml");
  ASSERT_TRUE(cluster_.WaitForState(b, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << cluster_.Log("w1.log");
  EXPECT_EQ(FinalLoss(b), straight);  // bit for bit
  // Each rank loaded once, reading (and verifying) every file of iter_0000008 once.
  const auto loads = RankValues("mt_rank_checkpoint_load_seconds_count", b);
  const auto bytes = RankValues("mt_rank_checkpoint_loaded_bytes_total", b);
  const auto seconds = RankValues("mt_rank_checkpoint_load_seconds_sum", b);
  EXPECT_EQ(loads, (std::map<std::string, double>{{"0", 1}, {"1", 1}}));
  EXPECT_EQ(bytes, (std::map<std::string, double>{{"0", static_cast<double>(bytes8)},
                                                  {"1", static_cast<double>(bytes8)}}));
  for (const auto& [rank, s] : seconds) EXPECT_GT(s, 0) << "rank " << rank;
  EXPECT_EQ(checkpoint::ListCheckpointSteps(cluster_.dir() + "/ckpt2"), (std::vector<int64_t>{12}));
}

}  // namespace
}  // namespace mt
