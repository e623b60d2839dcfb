#include "common/net/interfaces.h"

#include <algorithm>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::net {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(InterfacesTest, ListsLoopback) {
  MT_ASSERT_OK_AND_ASSIGN(std::vector<InterfaceAddress> all, ListInterfaces());
  const bool has_lo = std::any_of(all.begin(), all.end(), [](const InterfaceAddress& i) {
    return i.loopback && i.address.ToString() == "127.0.0.1";
  });
  EXPECT_TRUE(has_lo) << DescribeInterfaces(all);
}

TEST(InterfacesTest, RouteTowardLoopbackLeavesFromLoopback) {
  MT_ASSERT_OK_AND_ASSIGN(IpAddress source, SourceAddressToward("127.0.0.1", 7070));
  EXPECT_EQ(source.ToString(), "127.0.0.1");
}

TEST(InterfacesTest, UnresolvableHostIsAClearError) {
  absl::StatusOr<IpAddress> r = SourceAddressToward("no-such-host.invalid", 7070);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("no-such-host.invalid"));
}

TEST(ChooseNetworkTest, LoopbackCoordinatorGivesLoopback) {
  MT_ASSERT_OK_AND_ASSIGN(NetworkChoice c, ChooseNetwork("127.0.0.1:7070", "", ""));
  EXPECT_EQ(c.local_address, "127.0.0.1");
  EXPECT_EQ(c.advertise_address, "127.0.0.1");
  EXPECT_FALSE(c.interface.empty());
}

TEST(ChooseNetworkTest, AdvertiseAddressOverridesAndIsChecked) {
  MT_ASSERT_OK_AND_ASSIGN(NetworkChoice c, ChooseNetwork("127.0.0.1:7070", "", "203.0.113.7"));
  EXPECT_EQ(c.local_address, "127.0.0.1");
  EXPECT_EQ(c.advertise_address, "203.0.113.7");
  MT_ASSERT_OK_AND_ASSIGN(NetworkChoice v6, ChooseNetwork("127.0.0.1:7070", "", "[fd00::7]"));
  EXPECT_EQ(v6.advertise_address, "fd00::7");
  absl::StatusOr<NetworkChoice> bad = ChooseNetwork("127.0.0.1:7070", "", "10.0.0.1:80");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("--advertise-address"));
}

TEST(ChooseNetworkTest, BadFlagsNameTheFlag) {
  EXPECT_THAT(ChooseNetwork("127.0.0.1", "", "").status().message(), HasSubstr("--coordinator"));
  EXPECT_THAT(ChooseNetwork("127.0.0.1:7070", "no-such-if0", "").status().message(),
              HasSubstr("--interface no-such-if0"));
  MT_ASSERT_OK_AND_ASSIGN(NetworkChoice by_cidr,
                          ChooseNetwork("127.0.0.1:7070", "127.0.0.0/8", ""));
  EXPECT_EQ(by_cidr.local_address, "127.0.0.1");
}

TEST(RankNetworkEnvironmentTest, SetsOursAndKeepsTheUsers) {
  NetworkChoice c{"eth1", "10.77.0.2", "203.0.113.7"};
  std::vector<std::string> env = RankNetworkEnvironment(c, PortRange{29500, 29600}, {});
  EXPECT_THAT(env, Contains("MT_ADVERTISE_HOST=203.0.113.7"));
  EXPECT_THAT(env, Contains("MT_SOCKET_ADDRESS=10.77.0.2"));
  EXPECT_THAT(env, Contains("MT_SOCKET_IFNAME=eth1"));
  EXPECT_THAT(env, Contains("NCCL_SOCKET_IFNAME=eth1"));
  EXPECT_THAT(env, Contains("GLOO_SOCKET_IFNAME=eth1"));
  EXPECT_THAT(env, Contains("MT_RANK_PORT_RANGE=29500-29600"));
  std::vector<std::string> user =
      RankNetworkEnvironment(c, PortRange{}, {"PATH=/bin", "NCCL_SOCKET_IFNAME=ib0"});
  EXPECT_EQ(std::count_if(user.begin(), user.end(),
                          [](const std::string& s) { return s.rfind("NCCL_", 0) == 0; }),
            0);
  EXPECT_THAT(user, Contains("GLOO_SOCKET_IFNAME=eth1"));
  EXPECT_EQ(std::count_if(user.begin(), user.end(),
                          [](const std::string& s) { return s.rfind("MT_RANK_PORT", 0) == 0; }),
            0);
}

}  // namespace
}  // namespace mt::net
