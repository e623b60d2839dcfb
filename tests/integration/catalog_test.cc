// The checkpoint catalog through the whole stack: a real coordinator, a worker daemon and
// trainer processes (CPU, Gloo) training a tiny GPT that saves every 2 steps under a retention
// policy; then every mtctl checkpoints verb, a corrupted shard, a download compared byte for
// byte, Hugging Face export and import, deletion guards, and a job branched with
// --from-checkpoint.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/base/paths.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testutil/job_fixture.h"

namespace mt {
namespace {

using ::testing::HasSubstr;
using testutil::CommandResult;

std::string JobYaml(const std::string& name, const std::string& data, int iters,
                    const std::string& checkpoint) {
  testutil::TinyJob job(name, data, iters);
  job.dp = "1";
  job.global_batch_size = 4;
  job.dropout = "";
  job.split = "80,20,0";
  job.evaluation = "{eval_interval: 2, eval_iters: 1}";
  job.log_interval = 1;
  job.sections = {"checkpoint: " + checkpoint};
  return job.Yaml();
}

class CatalogTest : public testutil::JobFixture {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(JobFixture::SetUp());
    StartWorkers(1);
  }

  CommandResult Mtctl(std::vector<std::string> args) { return cluster_.Mtctl(std::move(args)); }

  // `mtctl -o json checkpoints list JOB`, by step.
  std::map<int64_t, mt::v1::Checkpoint> List(const std::string& job) {
    CommandResult r = Mtctl({"-o", "json", "checkpoints", "list", job});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    mt::v1::ListCheckpointsResponse list;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &list).ok()) << r.out;
    std::map<int64_t, mt::v1::Checkpoint> out;
    for (const auto& c : list.checkpoints()) out[c.step()] = c;
    return out;
  }

  // The last save's report may reach the coordinator just after the rank's exit.
  std::map<int64_t, mt::v1::Checkpoint> WaitForSave(const std::string& job, int64_t step) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    std::map<int64_t, mt::v1::Checkpoint> list = List(job);
    while ((list.count(step) == 0 || list[step].state() == mt::v1::CHECKPOINT_STATE_WRITING) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(200));
      list = List(job);
    }
    return list;
  }

  mt::v1::Checkpoint Describe(const std::string& id) {
    CommandResult r = Mtctl({"-o", "json", "checkpoints", "describe", id});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    mt::v1::Checkpoint c;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &c).ok()) << r.out;
    return c;
  }
};

TEST_F(CatalogTest, CatalogVerbsRetentionAndBranching) {
  // --- A job saving every 2 steps: keep the last 2, the best 1, and every 4th step. -------
  const std::string save = cluster_.dir() + "/ckpt";
  const std::string a =
      Submit(JobYaml("saver", data_, 8,
                     absl::StrCat("{save_dir: ", save,
                                  ", save_interval: 2, retention: "
                                  "{keep_last: 2, keep_best: 1, keep_every_steps: 4}}")),
             "a.yaml");
  ASSERT_TRUE(cluster_.WaitForState(a, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << cluster_.Log("w0.log") << cluster_.Log("coordinator.log");

  std::map<int64_t, mt::v1::Checkpoint> saved = WaitForSave(a, 8);
  ASSERT_EQ(saved.size(), 4u) << cluster_.Log("coordinator.log");
  // Every save was registered with its files, checksums and losses.
  int64_t best_step = -1;
  for (const auto& [step, c] : saved) {
    EXPECT_EQ(c.job_id(), a);
    EXPECT_EQ(c.directory(), absl::StrCat(save, "/", checkpoint::IterationDirName(step)));
    ASSERT_EQ(c.files_size(), 1);
    EXPECT_EQ(c.files(0).sha256().size(), 64u);
    EXPECT_GT(c.size_bytes(), 0);
    EXPECT_EQ(c.layout().world_size(), 1);
    EXPECT_FALSE(std::isnan(c.loss()));
    // A save runs after its step's evaluation (issue 19: a resumed run evaluates exactly as
    // the undisturbed one): with eval and save intervals of 2, every save carries its own
    // step's validation loss.
    EXPECT_FALSE(std::isnan(c.validation_loss())) << step;
    if (std::isnan(c.validation_loss())) continue;
    if (best_step < 0 || c.validation_loss() < saved[best_step].validation_loss()) best_step = step;
  }
  // Retention: last 2 (6, 8), every 4th (4, 8), the best validation loss; 8 is `latest`.
  std::set<int64_t> want = {4, 6, 8, best_step};
  for (const auto& [step, c] : saved) {
    const bool kept = want.count(step) > 0;
    EXPECT_EQ(c.state() != mt::v1::CHECKPOINT_STATE_DELETED, kept) << step;
    EXPECT_EQ(PathExists(c.directory()), kept) << step;
    EXPECT_EQ(c.is_latest(), step == 8) << step;
  }
  const mt::v1::Checkpoint latest = saved[8];
  const mt::v1::Checkpoint six = saved[6];
  const mt::v1::Checkpoint four = saved[4];

  // --- verify, then flip one bit of a shard: CORRUPT. ---------------------------------------
  CommandResult r = Mtctl({"checkpoints", "verify", six.id()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("VERIFIED"));
  const std::string shard = six.directory() + "/" + six.files(0).path();
  auto bytes = ReadFile(shard);
  ASSERT_TRUE(bytes.ok());
  std::string flipped = *bytes;
  flipped[flipped.size() / 2] ^= 0x01;
  ASSERT_TRUE(WriteFileAtomically(shard, flipped).ok());
  r = Mtctl({"checkpoints", "verify", six.id()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("CORRUPT"));
  EXPECT_THAT(r.out, HasSubstr(six.files(0).path()));
  EXPECT_EQ(Describe(six.id()).state(), mt::v1::CHECKPOINT_STATE_CORRUPT);
  // Its download fails the checksum check at the end.
  r = Mtctl({"checkpoints", "download", six.id(), cluster_.dir() + "/dl-corrupt"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("sha256"));
  // A stream that breaks (the shard is gone after the manifest was sent) leaves no directory,
  // so the same command can run again.
  ASSERT_EQ(::rename(shard.c_str(), (shard + ".away").c_str()), 0);
  const std::string dl_broken = cluster_.dir() + "/dl-broken";
  r = Mtctl({"checkpoints", "download", six.id(), dl_broken});
  EXPECT_EQ(r.exit_code, 3) << r.err;  // the server's NOT_FOUND for the missing shard
  EXPECT_THAT(r.err, HasSubstr(six.files(0).path()));
  EXPECT_FALSE(PathExists(dl_broken));
  ASSERT_EQ(::rename((shard + ".away").c_str(), shard.c_str()), 0);

  // --- download the latest and compare every byte. ------------------------------------------
  const std::string dl = cluster_.dir() + "/dl";
  r = Mtctl({"checkpoints", "download", latest.id(), dl});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("every sha256 checked"));
  for (const std::string& file : {std::string("manifest.json"), latest.files(0).path()}) {
    auto want_bytes = ReadFile(latest.directory() + "/" + file);
    auto got_bytes = ReadFile(dl + "/" + file);
    ASSERT_TRUE(want_bytes.ok() && got_bytes.ok()) << file;
    EXPECT_TRUE(*want_bytes == *got_bytes) << file;
  }
  // The download is a checkpoint directory in its own right.
  auto choice = checkpoint::ChooseCheckpoint(dl);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->manifest.step(), 8);

  // --- export to Hugging Face, import it back. ----------------------------------------------
  const std::string hf = cluster_.dir() + "/hf";
  r = Mtctl({"checkpoints", "export", latest.id(), hf, "--dtype", "float32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(PathExists(hf + "/config.json"));
  EXPECT_TRUE(PathExists(hf + "/model.safetensors"));
  r = Mtctl({"checkpoints", "export", latest.id(), hf});
  EXPECT_EQ(r.exit_code, 1) << r.err;  // exists
  r = Mtctl({"checkpoints", "import", hf});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string imported = std::string(absl::StripAsciiWhitespace(r.out));
  const mt::v1::Checkpoint imp = Describe(imported);
  EXPECT_EQ(imp.state(), mt::v1::CHECKPOINT_STATE_VERIFIED);
  EXPECT_EQ(imp.format_version(), 0);
  EXPECT_EQ(imp.directory(), hf);
  EXPECT_EQ(imp.files_size(), 2);
  r = Mtctl({"checkpoints", "import", hf});
  EXPECT_EQ(r.exit_code, 1) << r.err;  // already in the catalog
  EXPECT_THAT(r.err, HasSubstr(imported));
  r = Mtctl({"checkpoints", "verify", imported});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // The imported entry starts a job (weights only: a Hugging Face directory has no trainer
  // state, so it trains from step 1).
  const std::string from_hf =
      Submit(JobYaml("from-hf", data_, 4, "{}"), "hf.yaml", {"--from-checkpoint", imported});
  ASSERT_TRUE(cluster_.WaitForState(from_hf, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << cluster_.Log("w0.log");
  auto hf_job = cluster_.GetJob(from_hf);
  ASSERT_TRUE(hf_job.ok());
  EXPECT_EQ(hf_job->spec().checkpoint().load_dir(), hf);
  EXPECT_EQ(hf_job->progress().step(), 4);

  // --- path traversal and bad names are refused at the API (exit 2, naming the field). -------
  r = Mtctl({"checkpoints", "export", latest.id(), cluster_.dir() + "/../escape"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("output_dir"));
  r = Mtctl({"checkpoints", "import", "some/../../etc"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("directory"));
  r = Mtctl({"checkpoints", "delete", "../c-1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("checkpoint_id"));
  r = Mtctl({"checkpoints", "describe", "c-999"});
  EXPECT_EQ(r.exit_code, 3) << r.err;

  // --- delete an old one. -------------------------------------------------------------------
  r = Mtctl({"checkpoints", "delete", six.id()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(PathExists(six.directory()));
  EXPECT_EQ(Describe(six.id()).state(), mt::v1::CHECKPOINT_STATE_DELETED);

  // --- branch a new job from step 4: it starts there (its saves are 6 and 8). ----------------
  const std::string save2 = cluster_.dir() + "/ckpt2";
  const std::string b =
      Submit(JobYaml("branch", data_, 8, absl::StrCat("{save_dir: ", save2, ", save_interval: 2}")),
             "b.yaml", {"--from-checkpoint", four.id()});
  // While b may load it, step 4 cannot be deleted.
  r = Mtctl({"checkpoints", "delete", four.id()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("being loaded by ", b)));
  auto job = cluster_.GetJob(b);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->spec().checkpoint().load_dir(), four.directory());
  ASSERT_TRUE(cluster_.WaitForState(b, mt::v1::JOB_STATE_SUCCEEDED, absl::Minutes(5)))
      << cluster_.Log("w0.log");
  std::map<int64_t, mt::v1::Checkpoint> branched = WaitForSave(b, 8);
  std::vector<int64_t> steps;
  for (const auto& [step, c] : branched) steps.push_back(step);
  EXPECT_EQ(steps, (std::vector<int64_t>{6, 8}));
  // Once b ended, step 4 is free to go; a's latest stays until a is gone from the cluster.
  r = Mtctl({"checkpoints", "delete", four.id()});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // --- a submit from a checkpoint that is not usable is refused locally. ----------------------
  const std::string c3 = absl::StrCat(cluster_.dir(), "/c.yaml");
  ASSERT_TRUE(WriteFileAtomically(c3, JobYaml("nope", data_, 4, "{}")).ok());
  r = Mtctl({"submit", "--from-checkpoint", six.id(), c3});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("DELETED"));
}

}  // namespace
}  // namespace mt
