#include "worker/parallel/rank_network.h"

#include <map>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::parallel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

absl::StatusOr<RankNetwork> From(std::map<std::string, std::string> env,
                                 const std::string& coordinator = "127.0.0.1:7070") {
  return RankNetworkFromEnvironment(
      [env](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      coordinator);
}

TEST(RankNetworkTest, TheWorkersChoiceBindsGlooToTheExactAddress) {
  MT_ASSERT_OK_AND_ASSIGN(RankNetwork n, From({{"MT_ADVERTISE_HOST", "203.0.113.7"},
                                               {"MT_SOCKET_ADDRESS", "10.77.0.2"},
                                               {"MT_SOCKET_IFNAME", "eth1"},
                                               {"GLOO_SOCKET_IFNAME", "eth1"},
                                               {"MT_RANK_PORT_RANGE", "29500-29510"}}));
  EXPECT_EQ(n.advertise_host, "203.0.113.7");
  EXPECT_EQ(n.gloo_address, "10.77.0.2");
  EXPECT_THAT(n.gloo_interfaces, IsEmpty());
  EXPECT_EQ(n.store_ports.first, 29500);
  EXPECT_EQ(n.store_ports.last, 29510);
}

TEST(RankNetworkTest, TheUsersGlooInterfacesWin) {
  MT_ASSERT_OK_AND_ASSIGN(RankNetwork n, From({{"MT_ADVERTISE_HOST", "10.77.0.2"},
                                               {"MT_SOCKET_ADDRESS", "10.77.0.2"},
                                               {"MT_SOCKET_IFNAME", "eth1"},
                                               {"GLOO_SOCKET_IFNAME", "ib0,ib1"}}));
  EXPECT_THAT(n.gloo_interfaces, ElementsAre("ib0", "ib1"));
  EXPECT_EQ(n.gloo_address, "");
  EXPECT_TRUE(n.store_ports.empty());
}

TEST(RankNetworkTest, WithoutTheWorkerTheRouteToTheCoordinatorIsAdvertised) {
  MT_ASSERT_OK_AND_ASSIGN(RankNetwork n, From({}));
  EXPECT_EQ(n.advertise_host, "127.0.0.1");
  EXPECT_EQ(n.gloo_address, "");
  EXPECT_THAT(n.gloo_interfaces, IsEmpty());
}

TEST(RankNetworkTest, BadValuesAreClearErrors) {
  EXPECT_THAT(From({{"MT_RANK_PORT_RANGE", "9-1"}}).status().message(),
              HasSubstr("--rank-port-range"));
  EXPECT_THAT(From({}, "no-such-host.invalid:7070").status().message(),
              HasSubstr("MT_ADVERTISE_HOST"));
}

}  // namespace
}  // namespace mt::parallel
