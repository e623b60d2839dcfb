#include "coordinator/store/store.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "common/base/status_matchers.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::coordinator {
namespace {

using google::protobuf::util::TimeUtil;
using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

mt::v1::JobEvent Event(mt::v1::JobState state, const std::string& reason, int64_t t) {
  mt::v1::JobEvent e;
  e.set_state(state);
  e.set_reason(reason);
  *e.mutable_time() = TimeUtil::SecondsToTimestamp(t);
  return e;
}

mt::v1::Job NewJob(const std::string& name) {
  mt::v1::Job job;
  job.mutable_spec()->set_name(name);
  job.mutable_spec()->mutable_model()->set_num_layers(4);
  job.set_state(mt::v1::JOB_STATE_PENDING);
  *job.mutable_create_time() = TimeUtil::SecondsToTimestamp(100);
  return job;
}

TEST(Store, DeletedJobIsGoneAndItsIdNeverReturns) {
  const std::string dir = testutil::MakeTempDir("store");
  {
    MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
    for (const char* name : {"a", "b"}) {
      MT_ASSERT_OK(
          store->CreateJob(NewJob(name), "", Event(mt::v1::JOB_STATE_PENDING, "submitted", 100))
              .status());
    }
    MT_ASSERT_OK(store->DeleteJob("j-2"));  // the newest: its id must not be issued again
    EXPECT_EQ(store->GetJob("j-2").status().code(), absl::StatusCode::kNotFound);
    MT_ASSERT_OK_AND_ASSIGN(auto events, store->Events("j-2"));
    EXPECT_TRUE(events.empty());
    EXPECT_EQ(store->DeleteJob("j-2").code(), absl::StatusCode::kNotFound);
  }
  MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
  MT_ASSERT_OK_AND_ASSIGN(auto all, store->AllJobs());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].id(), "j-1");
  MT_ASSERT_OK_AND_ASSIGN(
      auto c,
      store->CreateJob(NewJob("c"), "", Event(mt::v1::JOB_STATE_PENDING, "submitted", 103)));
  EXPECT_EQ(c.id(), "j-3");
}

TEST(Store, JobsAndEventsSurviveReopening) {
  const std::string dir = testutil::MakeTempDir("store");
  {
    MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
    MT_ASSERT_OK_AND_ASSIGN(
        auto a,
        store->CreateJob(NewJob("a"), "", Event(mt::v1::JOB_STATE_PENDING, "submitted", 100)));
    MT_ASSERT_OK_AND_ASSIGN(
        auto b,
        store->CreateJob(NewJob("b"), "", Event(mt::v1::JOB_STATE_PENDING, "submitted", 101)));
    EXPECT_EQ(a.id(), "j-1");
    EXPECT_EQ(b.id(), "j-2");
    a.set_state(mt::v1::JOB_STATE_SCHEDULED);
    a.set_reason("placed on w-1");
    MT_ASSERT_OK(store->UpdateJob(a, Event(mt::v1::JOB_STATE_SCHEDULED, "placed on w-1", 102)));
    a.mutable_progress()->set_step(5);
    MT_ASSERT_OK(store->UpdateJob(a, std::nullopt));  // progress only, no event
  }
  MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
  MT_ASSERT_OK_AND_ASSIGN(auto a, store->GetJob("j-1"));
  EXPECT_EQ(a.state(), mt::v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(a.progress().step(), 5);
  EXPECT_EQ(a.spec().model().num_layers(), 4);
  MT_ASSERT_OK_AND_ASSIGN(auto events, store->Events("j-1"));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].reason(), "submitted");
  EXPECT_EQ(events[1].state(), mt::v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(TimeUtil::TimestampToSeconds(events[1].time()), 102);
  MT_ASSERT_OK_AND_ASSIGN(auto all, store->AllJobs());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].spec().name(), "b");
  // The next id continues after the stored ones.
  MT_ASSERT_OK_AND_ASSIGN(
      auto c,
      store->CreateJob(NewJob("c"), "", Event(mt::v1::JOB_STATE_PENDING, "submitted", 103)));
  EXPECT_EQ(c.id(), "j-3");
}

TEST(Store, RequestIdMakesSubmitIdempotent) {
  MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(testutil::MakeTempDir("store")));
  MT_ASSERT_OK_AND_ASSIGN(
      auto first,
      store->CreateJob(NewJob("a"), "req-1", Event(mt::v1::JOB_STATE_PENDING, "submitted", 1)));
  MT_ASSERT_OK_AND_ASSIGN(
      auto again,
      store->CreateJob(NewJob("other"), "req-1", Event(mt::v1::JOB_STATE_PENDING, "submitted", 2)));
  EXPECT_EQ(again.id(), first.id());
  EXPECT_EQ(again.spec().name(), "a");
  MT_ASSERT_OK_AND_ASSIGN(auto all, store->AllJobs());
  EXPECT_EQ(all.size(), 1u);
  MT_ASSERT_OK_AND_ASSIGN(auto events, store->Events(first.id()));
  EXPECT_EQ(events.size(), 1u);
}

TEST(Store, ErrorsNameTheProblem) {
  MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(testutil::MakeTempDir("store")));
  EXPECT_THAT(store->GetJob("j-9"), StatusIs(absl::StatusCode::kNotFound, "no job j-9"));
  EXPECT_THAT(store->GetJob("9"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a job id")));
  mt::v1::Job ghost = NewJob("ghost");
  ghost.set_id("j-42");
  EXPECT_THAT(store->UpdateJob(ghost, Event(mt::v1::JOB_STATE_RUNNING, "x", 1)),
              StatusIs(absl::StatusCode::kNotFound));
  MT_ASSERT_OK_AND_ASSIGN(auto events, store->Events("j-42"));
  EXPECT_TRUE(events.empty());  // the failed update wrote no event
  EXPECT_THAT(Store::Open(""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--state-dir")));
}

TEST(Store, RefusesADatabaseFromANewerVersion) {
  const std::string dir = testutil::MakeTempDir("store");
  { MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir)); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/coordinator.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value='99' WHERE key='schema_version'", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  EXPECT_THAT(Store::Open(dir), StatusIs(absl::StatusCode::kFailedPrecondition,
                                         HasSubstr("schema version 99 is newer")));
}

TEST(Store, Workers) {
  const std::string dir = testutil::MakeTempDir("store");
  {
    MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
    mt::v1::Worker w;
    w.set_id("w-3");
    w.mutable_resources()->set_node("n1");
    MT_ASSERT_OK(store->PutWorker(w));
    w.mutable_resources()->set_node("n2");
    MT_ASSERT_OK(store->PutWorker(w));
    w.set_id("bogus");
    EXPECT_THAT(store->PutWorker(w), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
  MT_ASSERT_OK_AND_ASSIGN(auto workers, store->AllWorkers());
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].resources().node(), "n2");
}

// A version-2 database (before worker identities and rendezvous keys were kept) is migrated,
// keeping its jobs; identities and rendezvous keys are then kept and read back.
TEST(Store, MigratesAVersion2DatabaseToIdentitiesAndRendezvousKeys) {
  const std::string dir = testutil::MakeTempDir("store");
  {
    MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
    MT_ASSERT_OK(
        store->CreateJob(NewJob("old"), "", Event(mt::v1::JOB_STATE_PENDING, "s", 1)).status());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/coordinator.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP TABLE worker_identities; DROP TABLE rendezvous; "
                         "DROP INDEX checkpoints_by_state; "
                         "UPDATE meta SET value='2' WHERE key='schema_version'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  {
    MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
    MT_ASSERT_OK_AND_ASSIGN(auto jobs, store->AllJobs());
    ASSERT_EQ(jobs.size(), 1u);
    MT_ASSERT_OK(store->PutWorkerIdentity(3, std::string(64, 'c')));
    MT_ASSERT_OK(store->PutWorkerIdentity(1, std::string(64, 'a')));
    EXPECT_THAT(store->PutWorkerIdentity(0, "x"), StatusIs(absl::StatusCode::kInvalidArgument));
    MT_ASSERT_OK(store->PutRendezvousKey("j-1", 0, "k", std::string("v\0w", 3)));
    MT_ASSERT_OK(store->PutRendezvousKey("j-1", 0, "k", "v2"));  // replaced
    MT_ASSERT_OK(store->PutRendezvousKey("j-1", 1, "k", "other attempt"));
    MT_ASSERT_OK(store->DropRendezvousSpace("j-1", 1));
  }
  MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));  // a coordinator restart
  MT_ASSERT_OK_AND_ASSIGN(auto ids, store->AllWorkerIdentities());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].id, 1);
  EXPECT_EQ(ids[0].credential_sha256, std::string(64, 'a'));
  EXPECT_EQ(ids[1].id, 3);
  MT_ASSERT_OK_AND_ASSIGN(auto keys, store->AllRendezvousKeys());
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0].job_id, "j-1");
  EXPECT_EQ(keys[0].attempt, 0);
  EXPECT_EQ(keys[0].key, "k");
  EXPECT_EQ(keys[0].value, "v2");
}

// A version-1 database (before the checkpoint catalog) is migrated, keeping its jobs.
TEST(Store, MigratesAVersion1DatabaseToTheCatalog) {
  const std::string dir = testutil::MakeTempDir("store");
  {
    MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
    MT_ASSERT_OK(
        store->CreateJob(NewJob("old"), "", Event(mt::v1::JOB_STATE_PENDING, "s", 1)).status());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/coordinator.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP TABLE checkpoints; DROP TABLE worker_identities; "
                         "DROP TABLE rendezvous; "
                         "UPDATE meta SET value='1' WHERE key='schema_version'",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
  MT_ASSERT_OK_AND_ASSIGN(auto jobs, store->AllJobs());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].spec().name(), "old");
  mt::v1::Checkpoint c;
  c.set_job_id("j-1");
  c.set_step(10);
  c.set_directory("/ckpt/iter_0000010");
  c.set_state(mt::v1::CHECKPOINT_STATE_COMPLETE);
  c.add_loading_job_ids("j-7");  // computed when read, never stored
  MT_ASSERT_OK_AND_ASSIGN(auto created, store->CreateCheckpoint(c));
  EXPECT_EQ(created.id(), "c-1");
  MT_ASSERT_OK_AND_ASSIGN(auto got, store->GetCheckpoint("c-1"));
  EXPECT_EQ(got.step(), 10);
  EXPECT_EQ(got.loading_job_ids_size(), 0);
  MT_ASSERT_OK_AND_ASSIGN(auto found, store->FindCheckpointByDirectory("/ckpt/iter_0000010"));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->id(), "c-1");
  got.set_state(mt::v1::CHECKPOINT_STATE_DELETED);
  MT_ASSERT_OK(store->UpdateCheckpoint(got));
  MT_ASSERT_OK_AND_ASSIGN(found, store->FindCheckpointByDirectory("/ckpt/iter_0000010"));
  EXPECT_FALSE(found.has_value());  // deleted entries do not claim their directory
  MT_ASSERT_OK_AND_ASSIGN(auto by_job, store->ListCheckpoints("j-1"));
  EXPECT_EQ(by_job.size(), 1u);
  MT_ASSERT_OK_AND_ASSIGN(auto other, store->ListCheckpoints("j-2"));
  EXPECT_TRUE(other.empty());
  mt::v1::Checkpoint ghost;
  ghost.set_id("c-9");
  EXPECT_THAT(store->UpdateCheckpoint(ghost), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store->GetCheckpoint("c-9"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store->GetCheckpoint("j-1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checkpoint_id")));
}

// The coordinator's rank-credential key and a job's owner stay what they were first stored as.
// Entries by state read only those rows, through their index (the catalog's periodic sweep
// of WRITING entries must not cost in proportion to the whole catalog).
TEST(Store, ListsCheckpointsInOneStateThroughAnIndex) {
  const std::string dir = testutil::MakeTempDir("store");
  MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
  for (int step = 1; step <= 6; ++step) {
    mt::v1::Checkpoint c;
    c.set_job_id("j-1");
    c.set_step(step);
    c.set_directory(absl::StrCat("/ckpt/iter_", step));
    c.set_state(step % 3 == 0 ? mt::v1::CHECKPOINT_STATE_WRITING
                              : mt::v1::CHECKPOINT_STATE_DELETED);
    MT_ASSERT_OK(store->CreateCheckpoint(c).status());
  }
  MT_ASSERT_OK_AND_ASSIGN(auto writing,
                          store->ListCheckpointsInState(mt::v1::CHECKPOINT_STATE_WRITING));
  ASSERT_EQ(writing.size(), 2u);
  EXPECT_EQ(writing[0].step(), 3);
  EXPECT_EQ(writing[1].step(), 6);
  MT_ASSERT_OK_AND_ASSIGN(auto complete,
                          store->ListCheckpointsInState(mt::v1::CHECKPOINT_STATE_COMPLETE));
  EXPECT_TRUE(complete.empty());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/coordinator.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* plan = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "EXPLAIN QUERY PLAN SELECT checkpoint FROM checkpoints WHERE "
                               "state = 1 ORDER BY id",
                               -1, &plan, nullptr),
            SQLITE_OK);
  std::string steps;
  while (sqlite3_step(plan) == SQLITE_ROW) {
    absl::StrAppend(&steps, reinterpret_cast<const char*>(sqlite3_column_text(plan, 3)), "\n");
  }
  sqlite3_finalize(plan);
  sqlite3_close(db);
  EXPECT_THAT(steps, HasSubstr("USING INDEX checkpoints_by_state (state=?)")) << steps;
}

// SQLite's page cache is bounded (Store::kPageCacheKiB), not its 2 MiB default: reading a
// catalog of several MiB end to end leaves SQLite holding at most about that much more.
TEST(Store, ThePageCacheIsBounded) {
  const std::string dir = testutil::MakeTempDir("store");
  MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
  mt::v1::Checkpoint c;
  c.set_job_id("j-1");
  c.set_state(mt::v1::CHECKPOINT_STATE_DELETED);
  for (int i = 0; i < 64; ++i) c.add_files()->set_path(std::string(60, 'f'));
  for (int step = 1; step <= 1000; ++step) {  // ~4.5 KB each: about 4.5 MB of rows
    c.set_step(step);
    c.set_directory(absl::StrCat("/ckpt/iter_", step));
    MT_ASSERT_OK(store->CreateCheckpoint(c).status());
  }
  store.reset();
  MT_ASSERT_OK_AND_ASSIGN(store, Store::Open(dir));  // a restart: an empty cache
  const int64_t before = sqlite3_memory_used();
  MT_ASSERT_OK_AND_ASSIGN(auto all, store->ListCheckpoints(""));
  ASSERT_EQ(all.size(), 1000u);
  const int64_t grown = sqlite3_memory_used() - before;
  EXPECT_LT(grown, (Store::kPageCacheKiB + 256) * 1024) << grown;
}

TEST(Store, MetaValuesAndJobOwnersSurviveReopening) {
  const std::string dir = testutil::MakeTempDir("store_meta");
  std::string job_id;
  {
    MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
    MT_ASSERT_OK_AND_ASSIGN(std::string first, store->GetOrPutMeta("rank_credential_key", "k1"));
    EXPECT_EQ(first, "k1");
    MT_ASSERT_OK_AND_ASSIGN(std::string again, store->GetOrPutMeta("rank_credential_key", "k2"));
    EXPECT_EQ(again, "k1");
    EXPECT_THAT(store->GetOrPutMeta("schema_version", "9").status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the store's own")));
    mt::v1::Job job = NewJob("owned");
    job.set_owner("alice");
    MT_ASSERT_OK_AND_ASSIGN(mt::v1::Job stored,
                            store->CreateJob(job, "", Event(mt::v1::JOB_STATE_PENDING, "s", 1)));
    job_id = stored.id();
  }
  MT_ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir));
  MT_ASSERT_OK_AND_ASSIGN(std::string kept, store->GetOrPutMeta("rank_credential_key", "k3"));
  EXPECT_EQ(kept, "k1");
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::Job job, store->GetJob(job_id));
  EXPECT_EQ(job.owner(), "alice");
}

}  // namespace
}  // namespace mt::coordinator
