// The job manager's keeping of generation jobs' text for their GenerateText streams
// (job_manager_generate.cc) over a real Store and WorkerRegistry and a fake clock: only the
// rank's own worker adds text, text after the exit report is still kept, release drops it, and
// a training job keeps none. The stream itself: tests/integration/inference_jobs_test.cc.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/base/files.h"
#include "common/spec/yaml_spec.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/jobs/job_manager_testing.h"
#include "coordinator/store/store.h"
#include "coordinator/workers/registry.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::coordinator {
namespace {

std::string SpecYaml(const std::string& inference) {
  return absl::StrCat(
      "name: g\n"
      "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 2, seq_length: 16}\n"
      "parallel: {tp: 1, pp: 1, dp: 1}\n"
      "training: {micro_batch_size: 2, global_batch_size: 2, train_iters: 20, lr: 1.0e-3}\n"
      "data:\n  data_path: /data/x\n"
      "  tokenizer: {vocab_file: /v.json, merge_file: /m.txt}\n"
      "checkpoint: {load_dir: /ckpt/iter_0000004}\n",
      inference);
}

class JobManagerGenerateTest : public JobManagerTestBase {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(SetUpManager("jm_generate", 2)); }

  mt::v1::Job Submit(const std::string& inference) {
    auto parsed = spec::ParseYamlSpec(SpecYaml(inference));
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    auto r = jobs_->Submit(parsed->spec, "");
    EXPECT_TRUE(r.ok()) << r.status();
    auto job = jobs_->Get(r.ok() ? r->job().id() : "", false);
    EXPECT_TRUE(job.ok());
    return job.ok() ? *job : mt::v1::Job();
  }

  // A report of rank 0 of `job` from `worker` carrying `text` of sample 0.
  absl::Status Text(const mt::v1::Job& job, const std::string& worker, const std::string& text,
                    bool done = false) {
    mt::v1::RankReport r;
    r.set_worker_id(worker);
    r.set_job_id(job.id());
    r.set_attempt(job.attempt());
    r.set_rank(0);
    r.mutable_generated()->set_text(text);
    r.mutable_generated()->set_done(done);
    return jobs_->OnRankReport(r);
  }

  std::string Texts(const std::string& job_id, size_t cursor) {
    auto got = jobs_->WaitForGenerated(job_id, cursor, absl::ZeroDuration());
    EXPECT_TRUE(got.ok()) << got.status();
    std::string out;
    for (const auto& t : got.ok() ? got->texts : std::vector<mt::v1::GeneratedText>{}) {
      absl::StrAppend(&out, t.text(), t.done() ? "|" : "");
    }
    return out;
  }
};

TEST_F(JobManagerGenerateTest, KeepsTheRanksTextUntilReleased) {
  const mt::v1::Job job =
      Submit("inference: {checkpoint_dir: /ckpt/iter_0000004, generate: {prompt: \"a; b\"}}\n");
  ASSERT_EQ(job.placement_size(), 1) << job.reason();
  const std::string worker = job.placement(0).worker_id();
  ASSERT_TRUE(Text(job, worker, "Hel").ok());
  ASSERT_TRUE(Text(job, worker, "lo").ok());
  // Only the worker holding the rank speaks for it.
  const std::string other = worker == "w-1" ? "w-2" : "w-1";
  EXPECT_FALSE(Text(job, other, "forged").ok());
  EXPECT_EQ(Texts(job.id(), 0), "Hello");
  EXPECT_EQ(Texts(job.id(), 1), "lo");
  // Nothing new: the wait times out with the job's state.
  auto none = jobs_->WaitForGenerated(job.id(), 2, absl::Milliseconds(20));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->texts.empty());
  EXPECT_EQ(none->state, mt::v1::JOB_STATE_SCHEDULED);

  // The exit report may overtake the last text (another call): the text is kept after it.
  mt::v1::RankExitReport exit;
  exit.set_worker_id(worker);
  exit.set_job_id(job.id());
  exit.set_attempt(job.attempt());
  exit.set_rank(0);
  exit.set_outcome(mt::v1::RANK_OUTCOME_SUCCEEDED);
  ASSERT_TRUE(jobs_->OnRankExit(exit).ok());
  ASSERT_TRUE(Text(job, worker, "!", /*done=*/true).ok());
  auto ended = jobs_->WaitForGenerated(job.id(), 2, absl::ZeroDuration());
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->state, mt::v1::JOB_STATE_SUCCEEDED);
  ASSERT_EQ(ended->texts.size(), 1u);
  EXPECT_TRUE(ended->texts[0].done());

  jobs_->ReleaseGenerated(job.id());
  EXPECT_EQ(Texts(job.id(), 0), "");
  ASSERT_TRUE(Text(job, worker, "late").ok());
  EXPECT_EQ(Texts(job.id(), 0), "");
  EXPECT_FALSE(jobs_->WaitForGenerated("j-999", 0, absl::ZeroDuration()).ok());
}

TEST_F(JobManagerGenerateTest, ATrainingJobKeepsNoText) {
  const mt::v1::Job job = Submit("");
  ASSERT_EQ(job.placement_size(), 1) << job.reason();
  ASSERT_TRUE(Text(job, job.placement(0).worker_id(), "text").ok());
  EXPECT_EQ(Texts(job.id(), 0), "");
}

}  // namespace
}  // namespace mt::coordinator
