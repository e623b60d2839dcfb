#include "coordinator/checkpoints/catalog.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"
#include "tests/testutil/test_checkpoint.h"

namespace mt::coordinator {
namespace {

using google::protobuf::util::TimeUtil;
using ::mt::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class FakeJobs : public CheckpointJobs {
 public:
  std::vector<Active> ActiveJobs() override {
    std::vector<Active> out;
    for (const auto& [id, job] : jobs) {
      if (job.state() == mt::v1::JOB_STATE_SUCCEEDED || job.state() == mt::v1::JOB_STATE_FAILED)
        continue;
      out.push_back({id, job.state(), job.spec().checkpoint().load_dir(),
                     job.spec().checkpoint().save_dir()});
    }
    return out;
  }
  absl::StatusOr<mt::v1::Job> GetJob(const std::string& job_id) override {
    auto it = jobs.find(job_id);
    if (it == jobs.end()) return absl::NotFoundError(absl::StrCat("no job ", job_id));
    return it->second;
  }
  mt::v1::Job& Add(const std::string& id, const std::string& save_dir,
                   const std::string& load_dir = "") {
    mt::v1::Job& job = jobs[id];
    job.set_id(id);
    job.set_state(mt::v1::JOB_STATE_RUNNING);
    job.mutable_spec()->mutable_checkpoint()->set_save_dir(save_dir);
    job.mutable_spec()->mutable_checkpoint()->set_load_dir(load_dir);
    return job;
  }
  std::map<std::string, mt::v1::Job> jobs;
};

mt::v1::RankReport Report(const std::string& job_id, int rank, int64_t step,
                          const std::string& dir) {
  mt::v1::RankReport r;
  r.set_job_id(job_id);
  r.set_rank(rank);
  r.mutable_checkpoint()->set_step(step);
  r.mutable_checkpoint()->set_directory(dir);
  r.mutable_checkpoint()->set_size_bytes(5000 + step);
  return r;
}

class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::MakeTempDir("catalog");
    auto store = Store::Open(dir_ + "/state");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto catalog = CheckpointCatalog::Create(store_.get(), &jobs_, &clock_);
    ASSERT_TRUE(catalog.ok());
    catalog_ = *std::move(catalog);
  }

  // Saves and reports a checkpoint of `job` at `step`; returns its entry.
  mt::v1::Checkpoint Save(const std::string& job, int64_t step, double vloss = std::nan("")) {
    const std::string save = jobs_.jobs[job].spec().checkpoint().save_dir();
    const std::string dir = testutil::WriteTestCheckpoint(save, job, step, vloss);
    auto c = catalog_->OnCheckpointReport(Report(job, 0, step, dir));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : mt::v1::Checkpoint();
  }

  std::map<int64_t, mt::v1::CheckpointState> StatesByStep(const std::string& job) {
    mt::v1::ListCheckpointsRequest req;
    req.set_job_id(job);
    auto list = catalog_->List(req);
    EXPECT_TRUE(list.ok());
    std::map<int64_t, mt::v1::CheckpointState> out;
    for (const auto& c : list->checkpoints()) out[c.step()] = c.state();
    return out;
  }

  std::string dir_;
  FakeClock clock_{absl::FromUnixSeconds(5000)};
  FakeJobs jobs_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<CheckpointCatalog> catalog_;
};

TEST_F(CatalogTest, RegistersWritingThenCompleteFromTheManifest) {
  const std::string save = dir_ + "/ckpt";
  jobs_.Add("j-1", save);
  // Rank 1 reports before rank 0 committed the manifest.
  const std::string dir =
      testutil::WriteTestCheckpoint(save, "j-1", 4, std::nan(""), /*commit=*/false);
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Checkpoint w,
                          catalog_->OnCheckpointReport(Report("j-1", 1, 4, dir)));
  EXPECT_EQ(w.state(), mt::v1::CHECKPOINT_STATE_WRITING);
  EXPECT_EQ(w.id(), "c-1");
  EXPECT_FALSE(w.is_latest());

  testutil::WriteTestCheckpoint(save, "j-1", 4, 2.5);
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Checkpoint c,
                          catalog_->OnCheckpointReport(Report("j-1", 0, 4, dir)));
  EXPECT_EQ(c.id(), "c-1");  // the same entry, completed
  EXPECT_EQ(c.state(), mt::v1::CHECKPOINT_STATE_COMPLETE);
  EXPECT_EQ(c.job_id(), "j-1");
  EXPECT_EQ(c.step(), 4);
  EXPECT_EQ(c.consumed_samples(), 32);
  EXPECT_DOUBLE_EQ(c.loss(), 2.5);
  EXPECT_DOUBLE_EQ(c.validation_loss(), 2.5);
  EXPECT_EQ(c.directory(), dir);
  EXPECT_EQ(c.layout().world_size(), 1);
  ASSERT_EQ(c.files_size(), 1);
  EXPECT_EQ(c.files(0).path(), "mp_rank_00_000.safetensors");
  EXPECT_EQ(c.files(0).size_bytes(), 5004);
  EXPECT_EQ(c.files(0).sha256().size(), 64u);
  EXPECT_EQ(c.size_bytes(), 5004);
  EXPECT_EQ(c.format_version(), checkpoint::kFormatVersion);
  EXPECT_TRUE(c.is_latest());
  EXPECT_EQ(c.create_time().seconds(), 1004);

  // A later report of the same save changes nothing.
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Checkpoint again,
                          catalog_->OnCheckpointReport(Report("j-1", 1, 4, dir)));
  EXPECT_EQ(again.id(), "c-1");
  EXPECT_EQ(again.state(), mt::v1::CHECKPOINT_STATE_COMPLETE);

  // The entry survives a coordinator restart (the store is reopened).
  catalog_.reset();
  store_.reset();
  MT_ASSERT_OK_AND_ASSIGN(store_, Store::Open(dir_ + "/state"));
  MT_ASSERT_OK_AND_ASSIGN(catalog_, CheckpointCatalog::Create(store_.get(), &jobs_, &clock_));
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Checkpoint got, catalog_->Get("c-1"));
  EXPECT_EQ(got.step(), 4);
  EXPECT_TRUE(got.is_latest());
}

TEST_F(CatalogTest, LatestMovesAndUncommittedSavesAreDropped) {
  const std::string save = dir_ + "/ckpt";
  jobs_.Add("j-1", save);
  Save("j-1", 2);
  // A save at step 4 never committed (its manifest never appeared).
  const std::string lost =
      testutil::WriteTestCheckpoint(save, "j-1", 4, std::nan(""), /*commit=*/false);
  MT_ASSERT_OK(catalog_->OnCheckpointReport(Report("j-1", 1, 4, lost)).status());
  ASSERT_TRUE(checkpoint::RemoveTree(lost).ok());  // rank 0 removed the failed save
  Save("j-1", 6);
  EXPECT_THAT(StatesByStep("j-1"),
              ElementsAre(::testing::Pair(2, mt::v1::CHECKPOINT_STATE_COMPLETE),
                          ::testing::Pair(4, mt::v1::CHECKPOINT_STATE_DELETED),
                          ::testing::Pair(6, mt::v1::CHECKPOINT_STATE_COMPLETE)));
  MT_ASSERT_OK_AND_ASSIGN(auto c1, catalog_->Get("c-1"));
  MT_ASSERT_OK_AND_ASSIGN(auto c3, catalog_->Get("c-3"));
  EXPECT_FALSE(c1.is_latest());
  EXPECT_TRUE(c3.is_latest());
}

TEST_F(CatalogTest, AWritingEntryOfAnEndedJobCanBeDeleted) {
  const std::string save = dir_ + "/ckpt";
  jobs_.Add("j-1", save);
  const std::string dead =
      testutil::WriteTestCheckpoint(save, "j-1", 4, std::nan(""), /*commit=*/false);
  MT_ASSERT_OK_AND_ASSIGN(auto w, catalog_->OnCheckpointReport(Report("j-1", 1, 4, dead)));
  ASSERT_EQ(w.state(), mt::v1::CHECKPOINT_STATE_WRITING);
  EXPECT_THAT(catalog_->Delete(w.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("still being written by j-1; once that job ends")));
  jobs_.jobs["j-1"].set_state(mt::v1::JOB_STATE_FAILED);  // the save died with the job
  MT_ASSERT_OK_AND_ASSIGN(auto gone, catalog_->Delete(w.id()));
  EXPECT_EQ(gone.state(), mt::v1::CHECKPOINT_STATE_DELETED);
  EXPECT_FALSE(PathExists(dead));
}

// A save report that arrives after its job moved on (found by the chaos soak: a rank's report
// queued across a coordinator outage, delivered after retention removed that save, or after the
// job restarted and ended) must not leave a WRITING entry that nothing will ever complete.
TEST_F(CatalogTest, ALateSaveReportLeavesNoWritingEntry) {
  const std::string save = dir_ + "/ckpt";
  mt::v1::Job& job = jobs_.Add("j-1", save);
  job.mutable_spec()->mutable_checkpoint()->mutable_retention()->set_keep_last(1);
  const std::string first = absl::StrCat(save, "/", checkpoint::IterationDirName(2));
  Save("j-1", 2);
  Save("j-1", 4);  // retention removes step 2
  ASSERT_FALSE(PathExists(first));
  // Rank 1's report of the save at step 2, late.
  EXPECT_THAT(catalog_->OnCheckpointReport(Report("j-1", 1, 2, first)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("late")));
  EXPECT_THAT(StatesByStep("j-1"),
              ElementsAre(::testing::Pair(2, mt::v1::CHECKPOINT_STATE_DELETED),
                          ::testing::Pair(4, mt::v1::CHECKPOINT_STATE_COMPLETE)));
  // The job ended: a report of a save of it that never committed registers nothing either.
  job.set_state(mt::v1::JOB_STATE_SUCCEEDED);
  const std::string dead =
      testutil::WriteTestCheckpoint(save, "j-1", 6, std::nan(""), /*commit=*/false);
  EXPECT_THAT(catalog_->OnCheckpointReport(Report("j-1", 1, 6, dead)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("ended")));
  EXPECT_EQ(StatesByStep("j-1").count(6), 0u);
}

// WRITING entries whose save is settled (its job ended, or its step is not newer than the
// save directory's `latest`) are resolved by the sweep: a committed save whose files verify
// becomes VERIFIED, one whose files do not CORRUPT, one never committed DELETED (its partial
// files removed). A save still in flight (a running job, a step past `latest`) is left alone.
TEST_F(CatalogTest, TheSweepResolvesSettledWritingEntries) {
  const std::string save = dir_ + "/ckpt";
  mt::v1::Job& job = jobs_.Add("j-1", save);
  auto writing = [&](int64_t step) {
    const std::string d =
        testutil::WriteTestCheckpoint(save, "j-1", step, std::nan(""), /*commit=*/false);
    auto w = catalog_->OnCheckpointReport(Report("j-1", 1, step, d));
    EXPECT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->state(), mt::v1::CHECKPOINT_STATE_WRITING);
    return d;
  };
  writing(2);  // rank 0 committed it later; its report was lost
  testutil::WriteTestCheckpoint(save, "j-1", 2, 1.5);
  const std::string never = writing(4);    // never committed
  const std::string flipped = writing(6);  // committed, then a byte flipped
  testutil::WriteTestCheckpoint(save, "j-1", 6, 1.25);
  const std::string in_flight = writing(8);  // past `latest` (6) in a running job
  {
    const std::string shard = flipped + "/" + checkpoint::ShardFileName(0, 0);
    std::string bytes = testutil::TestCheckpointBytes(6);
    bytes[100] ^= 1;
    ASSERT_TRUE(WriteFileAtomically(shard, bytes).ok());
  }
  EXPECT_EQ(catalog_->ResolveStaleWriting(), 3);
  EXPECT_THAT(StatesByStep("j-1"),
              ElementsAre(::testing::Pair(2, mt::v1::CHECKPOINT_STATE_VERIFIED),
                          ::testing::Pair(4, mt::v1::CHECKPOINT_STATE_DELETED),
                          ::testing::Pair(6, mt::v1::CHECKPOINT_STATE_CORRUPT),
                          ::testing::Pair(8, mt::v1::CHECKPOINT_STATE_WRITING)));
  EXPECT_FALSE(PathExists(never));
  EXPECT_TRUE(PathExists(in_flight));
  EXPECT_EQ(catalog_->ResolveStaleWriting(), 0);  // nothing left to settle
  // Once the job ends, its last save is settled too.
  job.set_state(mt::v1::JOB_STATE_FAILED);
  EXPECT_EQ(catalog_->ResolveStaleWriting(), 1);
  EXPECT_EQ(StatesByStep("j-1").at(8), mt::v1::CHECKPOINT_STATE_DELETED);
  EXPECT_FALSE(PathExists(in_flight));
}

// The sweep (every ~10 s) reads the WRITING entries only, not the whole catalog, which keeps
// every entry of every job ever run (DELETED ones too): reading it all made the coordinator's
// heap grow with its history (issue 19's chaos soak). Shown by making every other entry
// unreadable: a sweep that parsed them would fail and settle nothing.
TEST_F(CatalogTest, TheSweepReadsOnlyWritingEntries) {
  const std::string save = dir_ + "/ckpt";
  mt::v1::Job& job = jobs_.Add("j-1", save);
  for (int64_t step = 1; step <= 5; ++step) Save("j-1", step);  // keep_last 0: all COMPLETE
  const std::string never =
      testutil::WriteTestCheckpoint(save, "j-1", 6, std::nan(""), /*commit=*/false);
  ASSERT_TRUE(catalog_->OnCheckpointReport(Report("j-1", 1, 6, never)).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/state/coordinator.db").c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db,
                         absl::StrCat("UPDATE checkpoints SET checkpoint = x'ffff' WHERE state != ",
                                      static_cast<int>(mt::v1::CHECKPOINT_STATE_WRITING))
                             .c_str(),
                         nullptr, nullptr, &err),
            SQLITE_OK)
      << (err ? err : "");
  sqlite3_free(err);
  EXPECT_EQ(sqlite3_changes(db), 5);
  sqlite3_close(db);
  job.set_state(mt::v1::JOB_STATE_FAILED);
  EXPECT_EQ(catalog_->ResolveStaleWriting(), 1);
  EXPECT_FALSE(PathExists(never));
}

// A save whose reports were lost is registered with the next one; another job's checkpoint
// in the same directory is not.
TEST_F(CatalogTest, RegistersSavesWhoseReportsWereLost) {
  const std::string save = dir_ + "/ckpt";
  jobs_.Add("j-1", save);
  testutil::WriteTestCheckpoint(save, "j-1", 2, std::nan(""));
  testutil::WriteTestCheckpoint(save, "j-7", 3, std::nan(""));
  const std::string lost =
      testutil::WriteTestCheckpoint(save, "j-1", 4, std::nan(""), /*commit=*/false);
  MT_ASSERT_OK(catalog_->OnCheckpointReport(Report("j-1", 1, 4, lost)).status());  // WRITING
  testutil::WriteTestCheckpoint(save, "j-1", 4,
                                std::nan(""));  // committed, but rank 0's report was lost
  Save("j-1", 6);
  EXPECT_THAT(StatesByStep("j-1"),
              ElementsAre(::testing::Pair(2, mt::v1::CHECKPOINT_STATE_COMPLETE),
                          ::testing::Pair(4, mt::v1::CHECKPOINT_STATE_COMPLETE),
                          ::testing::Pair(6, mt::v1::CHECKPOINT_STATE_COMPLETE)));
  mt::v1::ListCheckpointsRequest all;
  MT_ASSERT_OK_AND_ASSIGN(auto list, catalog_->List(all));
  EXPECT_EQ(list.total_count(), 3);
}

struct RetentionCase {
  std::string name;
  int keep_last;
  int keep_best;
  int64_t keep_every;
  // Another active job loads the save at this step (0 = none).
  int64_t loaded_step;
  std::vector<int64_t> kept;
};

TEST_F(CatalogTest, RetentionDeletesDirectoriesAndKeepsTheRightOnes) {
  // Validation losses of the saves at steps 1..8.
  const std::vector<double> vloss = {3.0, 1.0, 2.9, 2.8, 2.7, 2.6, 2.5, 2.4};
  const std::vector<RetentionCase> cases = {
      {"off", 0, 0, 0, 0, {1, 2, 3, 4, 5, 6, 7, 8}}, {"last_2", 2, 0, 0, 0, {7, 8}},
      {"last_2_best_1", 2, 1, 0, 0, {2, 7, 8}},      {"last_1_every_3", 1, 0, 3, 0, {3, 6, 8}},
      {"last_1_loaded_4", 1, 0, 0, 4, {4, 8}},
  };
  int n = 0;
  for (const RetentionCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    const std::string job = absl::StrCat("j-", ++n);
    const std::string save = absl::StrCat(dir_, "/", tc.name);
    mt::v1::Job& j = jobs_.Add(job, save);
    j.mutable_spec()->mutable_checkpoint()->mutable_retention()->set_keep_last(tc.keep_last);
    j.mutable_spec()->mutable_checkpoint()->mutable_retention()->set_keep_best(tc.keep_best);
    j.mutable_spec()->mutable_checkpoint()->mutable_retention()->set_keep_every_steps(
        tc.keep_every);
    const std::string loader = absl::StrCat("j-", 100 + n);
    if (tc.loaded_step > 0) {
      jobs_.Add(loader, "", absl::StrCat(save, "/", checkpoint::IterationDirName(tc.loaded_step)));
    }
    for (int64_t step = 1; step <= 8; ++step) Save(job, step, vloss[step - 1]);
    std::vector<int64_t> kept;
    for (const auto& [step, state] : StatesByStep(job)) {
      const bool on_disk = PathExists(absl::StrCat(save, "/", checkpoint::IterationDirName(step)));
      if (state != mt::v1::CHECKPOINT_STATE_DELETED) {
        kept.push_back(step);
        EXPECT_TRUE(on_disk) << step;
      } else {
        EXPECT_FALSE(on_disk) << step;
      }
    }
    EXPECT_EQ(kept, tc.kept);
    jobs_.jobs.erase(loader);
  }
}

TEST_F(CatalogTest, VerifyFindsAFlippedBit) {
  const std::string save = dir_ + "/ckpt";
  jobs_.Add("j-1", save);
  const mt::v1::Checkpoint c = Save("j-1", 3);
  MT_ASSERT_OK_AND_ASSIGN(auto ok, catalog_->Verify(c.id()));
  EXPECT_TRUE(ok.ok());
  EXPECT_THAT(ok.problems(), IsEmpty());
  EXPECT_EQ(ok.checkpoint().state(), mt::v1::CHECKPOINT_STATE_VERIFIED);

  const std::string shard = c.directory() + "/" + c.files(0).path();
  std::string bytes = testutil::TestCheckpointBytes(3);
  bytes[100] ^= 0x04;
  ASSERT_TRUE(WriteFileAtomically(shard, bytes).ok());
  MT_ASSERT_OK_AND_ASSIGN(auto bad, catalog_->Verify(c.id()));
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.problems(), ElementsAre(HasSubstr("mp_rank_00_000.safetensors")));
  EXPECT_EQ(bad.checkpoint().state(), mt::v1::CHECKPOINT_STATE_CORRUPT);
  MT_ASSERT_OK_AND_ASSIGN(auto stored, catalog_->Get(c.id()));
  EXPECT_EQ(stored.state(), mt::v1::CHECKPOINT_STATE_CORRUPT);
}

TEST_F(CatalogTest, DeleteGuardsLatestAndLoadedCheckpoints) {
  const std::string save = dir_ + "/ckpt";
  mt::v1::Job& job = jobs_.Add("j-1", save);
  const mt::v1::Checkpoint c1 = Save("j-1", 2);
  const mt::v1::Checkpoint c2 = Save("j-1", 4);
  EXPECT_THAT(catalog_->Delete(c2.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("is the latest checkpoint of j-1, which is still running")));
  jobs_.Add("j-2", "", c1.directory());
  MT_ASSERT_OK_AND_ASSIGN(auto loaded, catalog_->Get(c1.id()));
  EXPECT_THAT(loaded.loading_job_ids(), ElementsAre("j-2"));
  EXPECT_THAT(catalog_->Delete(c1.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("being loaded by j-2")));
  jobs_.jobs["j-2"].set_state(mt::v1::JOB_STATE_SUCCEEDED);

  // Once the job ended, its latest may go: `latest` then names the newest one left.
  job.set_state(mt::v1::JOB_STATE_SUCCEEDED);
  MT_ASSERT_OK_AND_ASSIGN(auto deleted, catalog_->Delete(c2.id()));
  EXPECT_EQ(deleted.state(), mt::v1::CHECKPOINT_STATE_DELETED);
  EXPECT_FALSE(PathExists(c2.directory()));
  MT_ASSERT_OK_AND_ASSIGN(int64_t latest, checkpoint::ReadLatest(save));
  EXPECT_EQ(latest, 2);
  MT_ASSERT_OK_AND_ASSIGN(auto now_latest, catalog_->Get(c1.id()));
  EXPECT_TRUE(now_latest.is_latest());
  // Deleting again is a no-op; deleting the last one removes the pointer.
  MT_EXPECT_OK(catalog_->Delete(c2.id()).status());
  MT_EXPECT_OK(catalog_->Delete(c1.id()).status());
  EXPECT_THAT(checkpoint::ReadLatest(save), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(catalog_->Delete("c-99"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(CatalogTest, DownloadStreamsEveryFileWithItsChecksum) {
  const std::string save = dir_ + "/ckpt";
  jobs_.Add("j-1", save);
  const mt::v1::Checkpoint c = Save("j-1", 7);
  mt::v1::DownloadCheckpointRequest req;
  req.set_checkpoint_id(c.id());
  req.set_chunk_bytes(4096);
  std::map<std::string, std::string> files;
  std::map<std::string, std::string> sha;
  std::string current;
  int chunks = 0;
  MT_ASSERT_OK(catalog_->Download(req, [&](const mt::v1::DownloadCheckpointChunk& chunk) {
    if (chunk.has_file()) {
      current = chunk.file().path();
      sha[current] = chunk.file().sha256();
    }
    EXPECT_EQ(chunk.offset(), static_cast<int64_t>(files[current].size()));
    files[current] += chunk.data();
    ++chunks;
    return true;
  }));
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files["mp_rank_00_000.safetensors"], testutil::TestCheckpointBytes(7));
  EXPECT_EQ(sha["mp_rank_00_000.safetensors"], c.files(0).sha256());
  MT_ASSERT_OK_AND_ASSIGN(std::string manifest, ReadFile(c.directory() + "/manifest.json"));
  EXPECT_EQ(files["manifest.json"], manifest);
  EXPECT_EQ(chunks, 2 + 1);  // 5007 bytes in 4096-byte chunks, the manifest in one

  req.set_chunk_bytes(100);
  EXPECT_THAT(catalog_->Download(req, [](const auto&) { return true; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("chunk_bytes")));
  req.set_chunk_bytes(0);
  EXPECT_THAT(catalog_->Download(req, [](const auto&) { return false; }),
              StatusIs(absl::StatusCode::kCancelled));
}

TEST_F(CatalogTest, ImportsAnMtDirectoryOnce) {
  const std::string dir =
      testutil::WriteTestCheckpoint(dir_ + "/elsewhere", "j-9", 5, 1.5, true, true);
  mt::v1::ImportCheckpointRequest req;
  req.set_directory(dir + "/");
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Checkpoint c, catalog_->Import(req));
  EXPECT_EQ(c.state(), mt::v1::CHECKPOINT_STATE_VERIFIED);
  EXPECT_EQ(c.directory(), dir);
  EXPECT_EQ(c.job_id(), "");
  EXPECT_EQ(c.step(), 5);
  EXPECT_FALSE(c.is_latest());
  EXPECT_THAT(catalog_->Import(req), StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr(c.id())));
  req.set_directory(dir_);
  EXPECT_THAT(catalog_->Import(req),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("neither manifest.json")));
  req.set_directory(dir_ + "/nothing-here");
  EXPECT_THAT(catalog_->Import(req), StatusIs(absl::StatusCode::kNotFound));
  req.set_directory(dir);
  req.set_job_id("j-404");
  EXPECT_THAT(catalog_->Import(req), StatusIs(absl::StatusCode::kNotFound));

  // Deleting an import removes the catalog's files, never the user's other files.
  ASSERT_TRUE(WriteFileAtomically(dir + "/notes.txt", "mine").ok());
  MT_ASSERT_OK_AND_ASSIGN(auto deleted, catalog_->Delete(c.id()));
  EXPECT_TRUE(deleted.imported());
  EXPECT_EQ(deleted.state(), mt::v1::CHECKPOINT_STATE_DELETED);
  EXPECT_FALSE(PathExists(dir + "/manifest.json"));
  EXPECT_FALSE(PathExists(dir + "/mp_rank_00_000.safetensors"));
  EXPECT_TRUE(PathExists(dir + "/notes.txt"));
}

// A symbolic link in a checkpoint directory does not stream a file from outside it.
TEST_F(CatalogTest, DownloadSendsNoFileFromOutsideTheCheckpoint) {
  const std::string save = dir_ + "/ckpt";
  jobs_.Add("j-1", save);
  const mt::v1::Checkpoint c = Save("j-1", 2);
  const std::string secret = dir_ + "/secret";
  ASSERT_TRUE(WriteFileAtomically(secret, testutil::TestCheckpointBytes(2))
                  .ok());  // same bytes, same sha256
  const std::string shard = c.directory() + "/" + c.files(0).path();
  ASSERT_EQ(::unlink(shard.c_str()), 0);
  ASSERT_EQ(::symlink(secret.c_str(), shard.c_str()), 0);
  mt::v1::DownloadCheckpointRequest req;
  req.set_checkpoint_id(c.id());
  std::string sent;
  EXPECT_THAT(catalog_->Download(req,
                                 [&](const mt::v1::DownloadCheckpointChunk& chunk) {
                                   sent += chunk.data();
                                   return true;
                                 }),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("outside")));
  EXPECT_EQ(sent.find(testutil::TestCheckpointBytes(2)), std::string::npos);
}

// Every path or name a client gives is checked before anything is touched.
TEST_F(CatalogTest, RejectsTraversalAndBadNames) {
  const std::string save = dir_ + "/ckpt";
  jobs_.Add("j-1", save);
  const mt::v1::Checkpoint c = Save("j-1", 1);
  struct Case {
    std::string name;
    std::string path;
    std::string message;
  };
  const std::vector<Case> paths = {
      {"empty", "", "path is empty"},
      {"relative", "out/hf", "is relative"},
      {"dotdot", dir_ + "/../../etc/hf", "contains '..'"},
      {"dotdot_end", dir_ + "/..", "contains '..'"},
      {"nul", std::string("/tmp/a\0b", 8), "NUL"},
      {"long", "/" + std::string(5000, 'a'), "over the limit"},
  };
  for (const Case& tc : paths) {
    SCOPED_TRACE(tc.name);
    mt::v1::ExportCheckpointRequest ex;
    ex.set_checkpoint_id(c.id());
    ex.set_output_dir(tc.path);
    EXPECT_THAT(catalog_->Export(ex),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("output_dir"), HasSubstr(tc.message))));
    mt::v1::ImportCheckpointRequest im;
    im.set_directory(tc.path);
    EXPECT_THAT(catalog_->Import(im),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("directory"), HasSubstr(tc.message))));
  }
  for (const std::string& id :
       {std::string(""), std::string("c-"), std::string("c-x"), std::string("../c-1"),
        std::string("c-1\0", 4), std::string("j-1")}) {
    EXPECT_THAT(catalog_->Delete(id),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checkpoint_id")));
    EXPECT_THAT(catalog_->Get(id), StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(catalog_->Verify(id), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  mt::v1::ListCheckpointsRequest list;
  list.set_job_id("../j-1");
  EXPECT_THAT(catalog_->List(list),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("job_id")));
  // A report whose directory is not <save_dir>/iter_<step> is refused.
  for (const std::string& bad : {save + "/../elsewhere/iter_0000002", dir_ + "/iter_0000002",
                                 save + "/iter_0000003", std::string("iter_0000002")}) {
    EXPECT_THAT(catalog_->OnCheckpointReport(Report("j-1", 0, 2, bad)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checkpoint.directory")))
        << bad;
  }
  // An existing output directory and an unknown dtype.
  mt::v1::ExportCheckpointRequest ex;
  ex.set_checkpoint_id(c.id());
  ex.set_output_dir(save);
  EXPECT_THAT(catalog_->Export(ex), StatusIs(absl::StatusCode::kAlreadyExists));
  ex.set_output_dir(dir_ + "/hf");
  ex.set_dtype("int8");
  EXPECT_THAT(catalog_->Export(ex),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dtype")));
  ex.set_dtype("");
  ex.set_output_dir(dir_ + "/no/such/parent");
  EXPECT_THAT(catalog_->Export(ex), StatusIs(absl::StatusCode::kFailedPrecondition));
}

// Issue #20: a manifest whose tensors contradict the shard, or files linked out of the
// directory, never import as VERIFIED.
TEST_F(CatalogTest, ImportRefusesAManifestThatContradictsItsShards) {
  const std::string dir = testutil::WriteTestCheckpoint(dir_ + "/lying", "j-9", 5, 1.5, true, true);
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, checkpoint::ReadManifest(dir));
  m.mutable_tensors(0)->set_shape(0, 1 << 30);
  m.mutable_tensors(0)->set_full_shape(0, 1 << 30);
  ASSERT_TRUE(checkpoint::WriteManifest(dir, m).ok());
  mt::v1::ImportCheckpointRequest req;
  req.set_directory(dir);
  EXPECT_THAT(catalog_->Import(req),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("tensor model.w: the manifest says U8[1073741824], "
                                 "mp_rank_00_000.safetensors holds U8[5005]")));
  mt::v1::ListCheckpointsRequest list;
  MT_ASSERT_OK_AND_ASSIGN(auto listed, catalog_->List(list));
  EXPECT_THAT(listed.checkpoints(), IsEmpty());
}

TEST_F(CatalogTest, ImportRefusesFilesLinkedOutOfTheDirectory) {
  const std::string dir =
      testutil::WriteTestCheckpoint(dir_ + "/linked", "j-9", 5, 1.5, true, true);
  const std::string outside = dir_ + "/outside-shard.safetensors";
  ASSERT_EQ(::rename((dir + "/mp_rank_00_000.safetensors").c_str(), outside.c_str()), 0);
  ASSERT_EQ(::symlink(outside.c_str(), (dir + "/mp_rank_00_000.safetensors").c_str()), 0);
  mt::v1::ImportCheckpointRequest req;
  req.set_directory(dir);
  EXPECT_THAT(catalog_->Import(req),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("leads outside")));
  const std::string dir2 =
      testutil::WriteTestCheckpoint(dir_ + "/linked2", "j-9", 6, 1.5, true, true);
  const std::string manifest = dir_ + "/outside-manifest.json";
  ASSERT_EQ(::rename((dir2 + "/manifest.json").c_str(), manifest.c_str()), 0);
  ASSERT_EQ(::symlink(manifest.c_str(), (dir2 + "/manifest.json").c_str()), 0);
  req.set_directory(dir2);
  EXPECT_THAT(catalog_->Import(req),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("manifest.json")));
}

TEST_F(CatalogTest, ImportAndExportStayInsideTheAllowedRoots) {
  const std::string allowed = dir_ + "/allowed";
  const std::string outside = dir_ + "/outside";
  ASSERT_EQ(::mkdir(allowed.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(outside.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(outside.c_str(), (allowed + "/escape").c_str()), 0);
  MT_ASSERT_OK_AND_ASSIGN(AllowedRoots roots, AllowedRoots::Create({allowed}));
  MT_ASSERT_OK_AND_ASSIGN(catalog_,
                          CheckpointCatalog::Create(store_.get(), &jobs_, &clock_, roots));
  const std::string out_dir = testutil::WriteTestCheckpoint(outside, "j-9", 5, 1.5, true, true);
  const std::string in_dir =
      testutil::WriteTestCheckpoint(allowed + "/ck", "j-9", 6, 1.5, true, true);
  mt::v1::ImportCheckpointRequest im;
  im.set_directory(out_dir);
  EXPECT_THAT(catalog_->Import(im),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("directory: '" + out_dir + "' is outside the allowed roots")));
  im.set_directory(allowed + "/escape/iter_0000005");
  EXPECT_THAT(catalog_->Import(im), StatusIs(absl::StatusCode::kPermissionDenied,
                                             HasSubstr("resolves to '" + out_dir + "'")));
  im.set_directory(in_dir);
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Checkpoint c, catalog_->Import(im));
  for (const std::string& target :
       {std::string("/var/tmp/mt-export-test"), std::string("/root/mt-export-test"),
        outside + "/hf", allowed + "/escape/hf", allowed + "2/hf"}) {
    mt::v1::ExportCheckpointRequest ex;
    ex.set_checkpoint_id(c.id());
    ex.set_output_dir(target);
    EXPECT_THAT(catalog_->Export(ex),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("output_dir")))
        << target;
    EXPECT_FALSE(PathExists(target)) << target;
  }
}

}  // namespace
}  // namespace mt::coordinator

namespace mt::coordinator {
namespace {

// What eval and generation jobs load (catalog_inference.cc): an id or a directory, and the
// result of an eval job on the entry.
TEST_F(CatalogTest, ResolvesLoadTargetsAndRecordsEvaluations) {
  const std::string save = dir_ + "/ckpt";
  jobs_.Add("j-1", save);
  const mt::v1::Checkpoint c = Save("j-1", 4, 2.5);
  MT_ASSERT_OK_AND_ASSIGN(CheckpointCatalog::LoadTarget by_id, catalog_->ResolveForLoad(c.id()));
  EXPECT_EQ(by_id.checkpoint_id, c.id());
  EXPECT_EQ(by_id.directory, c.directory());
  EXPECT_EQ(by_id.manifest.step(), 4);
  // A save directory names its latest checkpoint, which the catalog knows.
  MT_ASSERT_OK_AND_ASSIGN(CheckpointCatalog::LoadTarget by_dir, catalog_->ResolveForLoad(save));
  EXPECT_EQ(by_dir.checkpoint_id, c.id());
  EXPECT_EQ(by_dir.directory, c.directory());
  EXPECT_THAT(catalog_->ResolveForLoad("c-99"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(catalog_->ResolveForLoad(dir_ + "/none"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(catalog_->ResolveForLoad("relative/dir"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(catalog_->ResolveForLoad(""), StatusIs(absl::StatusCode::kInvalidArgument));

  mt::v1::Job eval;
  eval.set_id("j-2");
  eval.set_state(mt::v1::JOB_STATE_SUCCEEDED);
  *eval.mutable_end_time() = TimeUtil::SecondsToTimestamp(6000);
  mt::v1::InferenceSpec* inference = eval.mutable_spec()->mutable_inference();
  inference->set_checkpoint_id(c.id());
  inference->set_checkpoint_dir(c.directory());
  inference->mutable_eval()->set_data_path("/data/valid");
  inference->mutable_eval()->set_split("0,1,0");
  inference->mutable_eval()->set_quantize("int8");
  eval.mutable_progress()->set_validation_loss(3.25);
  eval.mutable_progress()->set_validation_perplexity(25.79);
  eval.mutable_progress()->set_evaluated_tokens(96);
  ASSERT_TRUE(catalog_->RecordEvaluation(eval).ok());
  ASSERT_TRUE(catalog_->RecordEvaluation(eval).ok());  // once per job
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Checkpoint got, catalog_->Get(c.id()));
  ASSERT_EQ(got.evaluations_size(), 1);
  EXPECT_EQ(got.evaluations(0).job_id(), "j-2");
  EXPECT_EQ(got.evaluations(0).time().seconds(), 6000);
  EXPECT_EQ(got.evaluations(0).data_path(), "/data/valid");
  EXPECT_EQ(got.evaluations(0).split(), "0,1,0");
  EXPECT_DOUBLE_EQ(got.evaluations(0).loss(), 3.25);
  EXPECT_DOUBLE_EQ(got.evaluations(0).perplexity(), 25.79);
  EXPECT_EQ(got.evaluations(0).tokens(), 96);
  EXPECT_EQ(got.evaluations(0).quantize(), "int8");
  // By directory when the id was not given; the newest kMaxEvaluations kept.
  inference->clear_checkpoint_id();
  for (int i = 3; i < 3 + CheckpointCatalog::kMaxEvaluations; ++i) {
    eval.set_id(absl::StrCat("j-", i));
    ASSERT_TRUE(catalog_->RecordEvaluation(eval).ok());
  }
  MT_ASSERT_OK_AND_ASSIGN(got, catalog_->Get(c.id()));
  ASSERT_EQ(got.evaluations_size(), CheckpointCatalog::kMaxEvaluations);
  EXPECT_EQ(got.evaluations(0).job_id(), "j-3");
  // A checkpoint the catalog does not hold: nothing to record, no error.
  inference->set_checkpoint_dir(dir_ + "/elsewhere");
  EXPECT_TRUE(catalog_->RecordEvaluation(eval).ok());
  // A deleted checkpoint does not load.
  const mt::v1::Checkpoint c8 = Save("j-1", 8, 2.0);
  jobs_.jobs["j-1"].set_state(mt::v1::JOB_STATE_SUCCEEDED);
  ASSERT_TRUE(catalog_->Delete(c.id()).ok());
  EXPECT_THAT(catalog_->ResolveForLoad(c.id()), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(catalog_->ResolveForLoad(c8.id()).ok());
}

}  // namespace
}  // namespace mt::coordinator
