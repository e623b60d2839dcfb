// The ranks' rendezvous across a coordinator restart (issue 19, found by the chaos soak): a
// rendezvous call made while the coordinator is away waits for it (up to the call's deadline)
// instead of failing at once. Before, the ranks of a job placed just before a coordinator
// restart failed "joining the process groups: failed to connect to all addresses", which cost
// the job a restart (and, for a job that had just restarted, its failure: no new checkpoint).
// And keys published before a restart are still there after it (kept in SQLite).
#include <signal.h>
#include <sqlite3.h>

#include <future>

#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/base/paths.h"
#include "common/rpc/dial.h"
#include "coordinator/rendezvous/rank_credentials.h"
#include "gtest/gtest.h"
#include "tests/testutil/cluster.h"
#include "tests/testutil/job_fixture.h"
#include "worker/parallel/rendezvous_client.h"

namespace mt {
namespace {

TEST(RendezvousOutageTest, ACallMadeWhileTheCoordinatorIsDownWaitsForItsReturn) {
  testutil::Cluster cluster(testutil::BinDir());
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Log("coordinator.log");
  rpc::DialOptions dial;
  dial.address = cluster.address();
  auto channel = rpc::Dial(dial);
  ASSERT_TRUE(channel.ok()) << channel.status();
  parallel::RendezvousClient rendezvous(*channel, "j-404", 0, /*rank=*/0, /*credential=*/"");
  // Connected once, as a rank's channel is when its coordinator goes away.
  ASSERT_FALSE(absl::IsUnavailable(rendezvous.Set("k", "v")));
  cluster.KillCoordinator(SIGKILL);

  const absl::Time start = absl::Now();
  std::future<absl::Status> set =
      std::async(std::launch::async, [&] { return rendezvous.Set("k", "v"); });
  absl::SleepFor(absl::Seconds(2));
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Log("coordinator.log");
  const absl::Status s = set.get();
  // The restarted coordinator answered: no rank of the job was issued to this caller (the job is
  // unknown to it), which is this call's answer.
  EXPECT_FALSE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_GE(absl::Now() - start, absl::Seconds(2));
}

// Keys published before a coordinator restart are read after it (issue 19): the coordinator
// keeps the rendezvous keys of live attempts in SQLite. Before, they lived in memory only and a
// rank reading a key another had published before the restart waited out its timeout. A real
// two-rank job holds the attempt live; this test speaks as its ranks (their credentials are
// HMACs under the key the coordinator's database keeps) on keys of its own.
TEST(RendezvousOutageTest, AKeyPublishedBeforeACoordinatorRestartIsReadAfterIt) {
  if (!PathExists(testutil::BinDir() + "/mt-train")) GTEST_SKIP() << "no mt-train (no LibTorch)";
  testutil::Cluster cluster(testutil::BinDir());
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Log("coordinator.log");
  const std::string data = testutil::WriteRepetitiveDataset(cluster.dir(), 64, 200);
  for (const char* w : {"w0", "w1"}) ASSERT_TRUE(cluster.StartWorker(w, "node0").ok());
  ASSERT_TRUE(cluster.WaitForIdleWorkers(2, absl::Seconds(30)));
  testutil::TinyJob job("live", data, 100000);
  job.dp = "2";
  ASSERT_TRUE(WriteFileAtomically(cluster.dir() + "/live.yaml", job.Yaml()).ok());
  testutil::CommandResult submit = cluster.Mtctl({"submit", cluster.dir() + "/live.yaml"});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id(absl::StripAsciiWhitespace(submit.out));
  ASSERT_TRUE(cluster.WaitForState(id, mt::v1::JOB_STATE_RUNNING, absl::Minutes(1)))
      << cluster.Log("coordinator.log");

  // Read as the coordinator stored it (coordinator/store/store.h: meta), without migrating
  // or writing its database.
  std::string key_hex;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2((cluster.dir() + "/state/coordinator.db").c_str(), &db,
                              SQLITE_OPEN_READONLY, nullptr),
              SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='rank_credential_key'", -1,
                                 &st, nullptr),
              SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW) {
      key_hex = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  auto credentials = coordinator::RankCredentials::FromKey(key_hex);
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  rpc::DialOptions dial;
  dial.address = cluster.address();
  auto channel = rpc::Dial(dial);
  ASSERT_TRUE(channel.ok()) << channel.status();
  parallel::RendezvousClient rank0(*channel, id, 0, 0, credentials->Issue(id, 0, 0));
  parallel::RendezvousClient rank1(*channel, id, 0, 1, credentials->Issue(id, 0, 1));
  ASSERT_TRUE(rank0.Set("mt-test/published", "before the restart").ok());

  cluster.KillCoordinator(SIGKILL);
  ASSERT_TRUE(cluster.StartCoordinator().ok()) << cluster.Log("coordinator.log");
  const absl::Time start = absl::Now();
  auto got = rank1.Get({"mt-test/published"}, absl::Seconds(30));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::vector<std::string>{"before the restart"});
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(cluster.Mtctl({"cancel", id, "--no-save"}).exit_code, 0);
}

}  // namespace
}  // namespace mt
