// The ranks' rendezvous across a coordinator restart (issue 19, found by the chaos soak): a
// rendezvous call made while the coordinator is away waits for it (up to the call's deadline)
// instead of failing at once. Before, the ranks of a job placed just before a coordinator
// restart failed "joining the process groups: failed to connect to all addresses", which cost
// the job a restart (and, for a job that had just restarted, its failure: no new checkpoint).
#include <signal.h>

#include <future>

#include "absl/time/clock.h"
#include "common/rpc/dial.h"
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

}  // namespace
}  // namespace mt
