// Jobs end to end: a real coordinator, real worker daemons and real trainer processes (CPU,
// Gloo) on loopback, with a tiny GPT on a small repetitive dataset.
#include <signal.h>

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "common/spec/yaml_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/job_fixture.h"

namespace mt {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;
using testutil::CommandResult;

// A job of the tiny model; `dp` "auto" spreads it over the free workers.
std::string JobYaml(const std::string& name, const std::string& data_prefix, int iters,
                    const std::string& dp = "auto", int global_batch = 8) {
  testutil::TinyJob job(name, data_prefix, iters);
  job.dp = dp;
  job.global_batch_size = global_batch;
  return job.Yaml();
}

class JobsTest : public testutil::JobFixture {};

TEST_F(JobsTest, SubmitRunsToSuccessWithFallingLossOverTwoDataParallelRanks) {
  StartWorkers(2);
  const std::string id = Submit(JobYaml("ok", data_, 40), "ok.yaml");
  ASSERT_EQ(id, "j-1");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << EventText(id) << cluster_.Log("w0.log");
  auto job = cluster_.GetJob(id, true);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->layout().data_parallel_size(), 2);
  EXPECT_EQ(job->progress().step(), 40);
  EXPECT_EQ(job->progress().total_steps(), 40);
  // The loss starts at ln(50257) = 10.82 (uniform over the vocabulary); a repeated ten-token
  // phrase is learnt quickly: after 40 steps it is below three quarters of that.
  EXPECT_LT(job->progress().loss(), 0.75 * std::log(50257.0));
  EXPECT_GT(job->progress().tokens_per_second(), 0.0);
  // The history: submitted, placed, running, done, in that order.
  ASSERT_GE(job->events_size(), 4);
  EXPECT_EQ(job->events(0).state(), mt::v1::JOB_STATE_PENDING);
  EXPECT_EQ(job->events(1).state(), mt::v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(job->events(2).state(), mt::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job->events(job->events_size() - 1).state(), mt::v1::JOB_STATE_SUCCEEDED);
  EXPECT_TRUE(cluster_.WaitForIdleWorkers(2, absl::Seconds(10)));
  // mtctl watch on an ended job prints the end and exits 0.
  CommandResult w = cluster_.Mtctl({"watch", id});
  EXPECT_EQ(w.exit_code, 0) << w.err;
  EXPECT_THAT(w.out, HasSubstr("SUCCEEDED"));
  CommandResult logs = cluster_.Mtctl({"logs", id, "0"});
  EXPECT_EQ(logs.exit_code, 0);
  EXPECT_THAT(logs.out, HasSubstr("finished 40 steps"));
}

TEST_F(JobsTest, ASecondJobThatDoesNotFitWaitsThenRuns) {
  StartWorkers(2);
  const std::string a = Submit(JobYaml("first", data_, 25, "2"), "a.yaml");
  const std::string b = Submit(JobYaml("second", data_, 5, "2"), "b.yaml");
  auto jb = cluster_.GetJob(b);
  ASSERT_TRUE(jb.ok());
  EXPECT_EQ(jb->state(), mt::v1::JOB_STATE_PENDING);
  EXPECT_THAT(jb->reason(), HasSubstr("waiting for 2 free workers"));
  EXPECT_EQ(jb->queue_position(), 0);
  ASSERT_TRUE(cluster_.WaitForState(b, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << EventText(b);
  auto ja = cluster_.GetJob(a);
  jb = cluster_.GetJob(b);
  ASSERT_TRUE(ja.ok() && jb.ok());
  EXPECT_EQ(ja->state(), mt::v1::JOB_STATE_SUCCEEDED);
  // Gang scheduling, no over-subscription: b started only after a ended.
  EXPECT_GE(jb->start_time().seconds() * 1'000'000'000 + jb->start_time().nanos(),
            ja->end_time().seconds() * 1'000'000'000 + ja->end_time().nanos());
}

TEST_F(JobsTest, CancelStopsEveryRank) {
  StartWorkers(2);
  const std::string id = Submit(JobYaml("long", data_, 100000), "long.yaml");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_RUNNING, absl::Minutes(2)))
      << EventText(id);
  CommandResult r = cluster_.Mtctl({"cancel", id, "enough"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("CANCELLED"));
  // Both ranks stop and both workers are free again within 10 s.
  EXPECT_TRUE(cluster_.WaitForIdleWorkers(2, absl::Seconds(10))) << EventText(id);
  auto job = cluster_.GetJob(id);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state(), mt::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job->reason(), "cancelled: enough");
  // Cancelling again is refused, naming the state.
  r = cluster_.Mtctl({"cancel", id});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("already ended (CANCELLED)"));
}

TEST_F(JobsTest, AKilledWorkerFailsItsJobWithAReason) {
  StartWorkers(2);
  const std::string id = Submit(JobYaml("victim", data_, 100000), "victim.yaml");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_RUNNING, absl::Minutes(2)));
  cluster_.worker("w1")->Signal(SIGKILL);
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_FAILED, absl::Seconds(30)))
      << EventText(id);
  auto job = cluster_.GetJob(id);
  ASSERT_TRUE(job.ok());
  // Either the lost heartbeat or the surviving rank's broken collective tells first.
  EXPECT_THAT(job->reason(), ::testing::AnyOf(HasSubstr("lost"), HasSubstr("failed")));
  // The surviving worker is stopped and free again.
  EXPECT_TRUE(cluster_.WaitForIdleWorkers(1, absl::Seconds(20)));
}

TEST_F(JobsTest, CoordinatorRestartMidJobKeepsTheJobAndItsHistory) {
  StartWorkers(2);
  const std::string id = Submit(JobYaml("survivor", data_, 60), "survivor.yaml");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_RUNNING, absl::Minutes(2)));
  cluster_.KillCoordinator(SIGKILL);
  ASSERT_TRUE(cluster_.StartCoordinator().ok()) << cluster_.Log("coordinator.log");
  ASSERT_TRUE(cluster_.WaitForState(id, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << EventText(id) << cluster_.Log("coordinator.log");
  auto job = cluster_.GetJob(id, true);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->progress().step(), 60);
  // Its transitions (notes within a state, e.g. a straggler on a loaded machine, aside).
  EXPECT_EQ(States(id), (std::vector<mt::v1::JobState>{
                            mt::v1::JOB_STATE_PENDING, mt::v1::JOB_STATE_SCHEDULED,
                            mt::v1::JOB_STATE_RUNNING, mt::v1::JOB_STATE_SUCCEEDED}));
}

TEST_F(JobsTest, InvalidSpecsAndUnknownIdsChangeNothing) {
  StartWorkers(1);
  const std::string path = cluster_.dir() + "/bad.yaml";
  ASSERT_TRUE(WriteFileAtomically(path,
                                  "model: {num_layers: 2, hidden_size: 30, "
                                  "num_attention_heads: 4, seq_length: 16}\n"
                                  "training: {micro_batch: 2}\n")
                  .ok());
  CommandResult r = cluster_.Mtctl({"submit", path});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("training.micro_batch: unknown key"));
  r = cluster_.Mtctl({"describe", "j-42"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("no job j-42"));
  r = cluster_.Mtctl({"cancel", "nonsense"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("not a job id"));
  // At the API, a path that walks out with '..' or is relative is refused, naming the field.
  auto parsed = spec::ParseYamlSpec(
      "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 16}\n"
      "training: {micro_batch_size: 2, global_batch_size: 4, train_iters: 2, lr: 0.001}\n"
      "data: {data_path: /data/x, tokenizer: {vocab_file: /a/v.json, merge_file: /a/m.txt}}\n"
      "checkpoint: {save_dir: /srv/ckpt/../../etc}\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<mt::v1::Job> submitted = cluster_.SubmitJob(parsed->spec);
  EXPECT_THAT(submitted.status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("checkpoint.save_dir (\"/srv/ckpt/../../etc\") must be a "
                                 "normalized path without '.', '..' or repeated slashes: give "
                                 "\"/etc\"")));
  parsed->spec.mutable_checkpoint()->set_save_dir("ckpt");
  EXPECT_THAT(cluster_.SubmitJob(parsed->spec).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("checkpoint.save_dir (\"ckpt\") must be an absolute path")));
  r = cluster_.Mtctl({"list", "-o", "json"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("\"id\"")));
}

TEST_F(JobsTest, ACrashingTrainerLeavesItsWorkerReadyForTheNextJob) {
  StartWorkers(1);
  const std::string bad =
      Submit(JobYaml("nodata", cluster_.dir() + "/missing", 5, "1", 2), "nodata.yaml");
  ASSERT_TRUE(cluster_.WaitForState(bad, mt::v1::JOB_STATE_FAILED, absl::Minutes(2)))
      << EventText(bad);
  auto job = cluster_.GetJob(bad);
  ASSERT_TRUE(job.ok());
  EXPECT_THAT(job->reason(), HasSubstr("rank 0 on w-1 failed: exit code 1"));
  EXPECT_THAT(job->reason(), HasSubstr("missing"));
  // The daemon lives on and takes the next job.
  ASSERT_TRUE(cluster_.WaitForIdleWorkers(1, absl::Seconds(10)));
  const std::string good = Submit(JobYaml("next", data_, 5, "1", 2), "next.yaml");
  EXPECT_TRUE(cluster_.WaitForState(good, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(3)))
      << EventText(good);
}

}  // namespace
}  // namespace mt
