#include "common/net/address.h"

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::net {
namespace {

using ::testing::HasSubstr;

IpAddress Ip(absl::string_view s) {
  absl::StatusOr<IpAddress> ip = ParseIp(s);
  EXPECT_TRUE(ip.ok()) << s;
  return ip.value_or(IpAddress{});
}

TEST(ParseIpTest, ReadsIpv4AndIpv6AndRoundTrips) {
  EXPECT_EQ(Ip("10.77.0.2").family, Family::kIpv4);
  EXPECT_EQ(Ip("10.77.0.2").ToString(), "10.77.0.2");
  EXPECT_EQ(Ip("10.77.0.2").bytes[3], 2);
  EXPECT_EQ(Ip("fd00::2").family, Family::kIpv6);
  EXPECT_EQ(Ip("fd00:0:0::2").ToString(), "fd00::2");
  EXPECT_EQ(Ip("[fd00::2]").ToString(), "fd00::2");
  EXPECT_EQ(Ip("::1").ToString(), "::1");
}

TEST(ParseIpTest, RejectsNamesAndGarbage) {
  for (const char* bad : {"", "localhost", "10.0.0", "10.0.0.256", "1.2.3.4.5", "fd00:::1",
                          "[10.0.0.1", "10.0.0.1/24", " 10.0.0.1"}) {
    EXPECT_FALSE(ParseIp(bad).ok()) << bad;
  }
  EXPECT_THAT(ParseIp("eth0").status().message(), HasSubstr("not an IP address"));
}

TEST(IpAddressTest, LoopbackAndLinkLocal) {
  EXPECT_TRUE(Ip("127.0.0.1").is_loopback());
  EXPECT_TRUE(Ip("127.1.2.3").is_loopback());
  EXPECT_TRUE(Ip("::1").is_loopback());
  EXPECT_FALSE(Ip("10.0.0.1").is_loopback());
  EXPECT_FALSE(Ip("::2").is_loopback());
  EXPECT_TRUE(Ip("169.254.1.1").is_link_local());
  EXPECT_TRUE(Ip("fe80::1").is_link_local());
  EXPECT_TRUE(Ip("febf::1").is_link_local());
  EXPECT_FALSE(Ip("fec0::1").is_link_local());
  EXPECT_FALSE(Ip("10.0.0.1").is_link_local());
  EXPECT_NE(Ip("10.0.0.1"), Ip("10.0.0.2"));
  EXPECT_EQ(Ip("10.0.0.1"), Ip("10.0.0.1"));
}

TEST(CidrTest, ParsesPrefixesAndSingleHosts) {
  MT_ASSERT_OK_AND_ASSIGN(Cidr c, ParseCidr("10.77.0.0/24"));
  EXPECT_EQ(c.prefix_length, 24);
  MT_ASSERT_OK_AND_ASSIGN(Cidr host, ParseCidr("10.77.0.2"));
  EXPECT_EQ(host.prefix_length, 32);
  MT_ASSERT_OK_AND_ASSIGN(Cidr v6, ParseCidr("fd00::/64"));
  EXPECT_EQ(v6.prefix_length, 64);
  MT_ASSERT_OK_AND_ASSIGN(Cidr v6host, ParseCidr("fd00::1"));
  EXPECT_EQ(v6host.prefix_length, 128);
  for (const char* bad : {"10.77.0.0/33", "10.77.0.0/-1", "10.77.0.0/", "10.77.0.0/x", "fd00::/129",
                          "eth0", "/24", "10.77.0.0/+8"}) {
    EXPECT_FALSE(ParseCidr(bad).ok()) << bad;
  }
}

TEST(CidrTest, ContainsEveryBoundary) {
  const struct {
    const char* cidr;
    const char* ip;
    bool in;
  } cases[] = {
      {"10.77.0.0/24", "10.77.0.0", true},
      {"10.77.0.0/24", "10.77.0.255", true},
      {"10.77.0.0/24", "10.77.1.0", false},
      {"10.77.0.0/24", "10.76.255.255", false},
      {"10.77.0.0/23", "10.77.1.9", true},
      {"10.77.0.0/25", "10.77.0.128", false},
      {"10.77.0.0/25", "10.77.0.127", true},
      {"0.0.0.0/0", "192.168.1.1", true},
      {"10.77.0.2", "10.77.0.2", true},
      {"10.77.0.2", "10.77.0.3", false},
      {"10.77.0.9/24", "10.77.0.1", true},
      {"fd00::/64", "fd00::1234", true},
      {"fd00::/64", "fd00:0:0:1::1", false},
      {"fd00::/8", "fdff::1", true},
      {"fd00::/7", "fc00::1", true},
      {"fd00::/64", "10.77.0.1", false},
      {"10.77.0.0/24", "::ffff:10.77.0.1", false},
      {"::/0", "fe80::1", true},
      {"fd00::1/128", "fd00::1", true},
      {"fd00::1/128", "fd00::2", false},
  };
  for (const auto& c : cases) {
    MT_ASSERT_OK_AND_ASSIGN(Cidr cidr, ParseCidr(c.cidr));
    EXPECT_EQ(CidrContains(cidr, Ip(c.ip)), c.in) << c.cidr << " " << c.ip;
  }
}

TEST(HostPortTest, ParsesNamesIpv4AndBracketedIpv6) {
  MT_ASSERT_OK_AND_ASSIGN(HostPort a, ParseHostPort("10.77.0.1:7070", "--coordinator"));
  EXPECT_EQ(a.host, "10.77.0.1");
  EXPECT_EQ(a.port, 7070);
  MT_ASSERT_OK_AND_ASSIGN(HostPort b, ParseHostPort("[fd00::1]:7070", "--coordinator"));
  EXPECT_EQ(b.host, "fd00::1");
  EXPECT_EQ(b.port, 7070);
  MT_ASSERT_OK_AND_ASSIGN(HostPort c, ParseHostPort("node-1.example:0", "--listen"));
  EXPECT_EQ(c.host, "node-1.example");
  EXPECT_EQ(c.port, 0);
  MT_ASSERT_OK_AND_ASSIGN(HostPort d, ParseHostPort("h:65535", "--x"));
  EXPECT_EQ(d.port, 65535);
}

TEST(HostPortTest, RejectsWithTheFieldAndAnExample) {
  for (const char* bad :
       {"", "10.0.0.1", ":7070", "h:", "h:65536", "h:-1", "h:+1", "h:x", "fd00::1:7070",
        "[fd00::1]", "[fd00::1]7070", "[fd00::1:7070", "[nothost]:1"}) {
    absl::StatusOr<HostPort> r = ParseHostPort(bad, "--coordinator");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("--coordinator")) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("e.g.")) << bad;
  }
}

TEST(HostPortTest, JoinBracketsIpv6) {
  EXPECT_EQ(JoinHostPort("10.0.0.1", 80), "10.0.0.1:80");
  EXPECT_EQ(JoinHostPort("fd00::1", 80), "[fd00::1]:80");
  EXPECT_EQ(JoinHostPort("node", 0), "node:0");
  MT_ASSERT_OK_AND_ASSIGN(HostPort back, ParseHostPort(JoinHostPort("fd00::1", 29500), "x"));
  EXPECT_EQ(back.host, "fd00::1");
  EXPECT_EQ(back.port, 29500);
}

TEST(PortRangeTest, ParsesRangesAndSinglePorts) {
  MT_ASSERT_OK_AND_ASSIGN(PortRange r, ParsePortRange("29500-29600", "--rank-port-range"));
  EXPECT_EQ(r.first, 29500);
  EXPECT_EQ(r.last, 29600);
  EXPECT_EQ(r.size(), 101);
  MT_ASSERT_OK_AND_ASSIGN(PortRange one, ParsePortRange("29500", "--rank-port-range"));
  EXPECT_EQ(one.first, 29500);
  EXPECT_EQ(one.last, 29500);
  EXPECT_EQ(one.size(), 1);
  MT_ASSERT_OK_AND_ASSIGN(PortRange none, ParsePortRange("", "--rank-port-range"));
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.size(), 0);
  for (const char* bad : {"0-10", "10-0", "29600-29500", "1-65536", "a-b", "-5", "5-", "1--2",
                          "+1-2", "29500-29600-29700"}) {
    absl::StatusOr<PortRange> p = ParsePortRange(bad, "--rank-port-range");
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_THAT(p.status().message(), HasSubstr("--rank-port-range")) << bad;
  }
}

std::vector<InterfaceAddress> Machine() {
  const auto i = [](const char* name, const char* ip, bool up, bool lo) {
    return InterfaceAddress{name, Ip(ip), up, lo};
  };
  return {i("lo", "127.0.0.1", true, true),    i("eth0", "192.168.1.5", true, false),
          i("eth1", "10.77.0.2", true, false), i("eth1", "fe80::2", true, false),
          i("eth1", "fd00::2", true, false),   i("eth2", "10.88.0.2", false, false),
          i("lo", "::1", true, true)};
}

TEST(ChooseInterfaceTest, DefaultIsTheInterfaceOfTheRouteNotTheFirstNonLoopback) {
  MT_ASSERT_OK_AND_ASSIGN(InterfaceAddress c, ChooseInterface(Machine(), "", Ip("10.77.0.2")));
  EXPECT_EQ(c.name, "eth1");
  EXPECT_EQ(c.address.ToString(), "10.77.0.2");
  MT_ASSERT_OK_AND_ASSIGN(InterfaceAddress v6, ChooseInterface(Machine(), "", Ip("fd00::2")));
  EXPECT_EQ(v6.name, "eth1");
  EXPECT_EQ(v6.address.ToString(), "fd00::2");
  MT_ASSERT_OK_AND_ASSIGN(InterfaceAddress lo, ChooseInterface(Machine(), "", Ip("127.0.0.1")));
  EXPECT_EQ(lo.name, "lo");
}

TEST(ChooseInterfaceTest, DefaultWithoutARouteOrAHolderSaysWhatToDo) {
  absl::StatusOr<InterfaceAddress> none = ChooseInterface(Machine(), "", std::nullopt);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("--interface"));
  EXPECT_THAT(none.status().message(), HasSubstr("eth1 10.77.0.2"));
  absl::StatusOr<InterfaceAddress> stray = ChooseInterface(Machine(), "", Ip("10.99.0.1"));
  ASSERT_FALSE(stray.ok());
  EXPECT_THAT(stray.status().message(), HasSubstr("10.99.0.1"));
}

TEST(ChooseInterfaceTest, ByCidrOrAddress) {
  MT_ASSERT_OK_AND_ASSIGN(InterfaceAddress c,
                          ChooseInterface(Machine(), "10.77.0.0/24", std::nullopt));
  EXPECT_EQ(c.name, "eth1");
  EXPECT_EQ(c.address.ToString(), "10.77.0.2");
  MT_ASSERT_OK_AND_ASSIGN(InterfaceAddress v6,
                          ChooseInterface(Machine(), "fd00::/64", std::nullopt));
  EXPECT_EQ(v6.address.ToString(), "fd00::2");
  MT_ASSERT_OK_AND_ASSIGN(InterfaceAddress one,
                          ChooseInterface(Machine(), "192.168.1.5", std::nullopt));
  EXPECT_EQ(one.name, "eth0");
  // eth2 is down: its block has no usable interface.
  absl::StatusOr<InterfaceAddress> down = ChooseInterface(Machine(), "10.88.0.0/16", std::nullopt);
  ASSERT_FALSE(down.ok());
  EXPECT_THAT(down.status().message(), HasSubstr("--interface 10.88.0.0/16"));
  EXPECT_THAT(down.status().message(), HasSubstr("eth2 10.88.0.2 (down)"));
  EXPECT_FALSE(ChooseInterface(Machine(), "10.77.0.0/33", std::nullopt).ok());
}

TEST(ChooseInterfaceTest, ByNamePrefersTheRouteFamilyAndNeverLinkLocal) {
  MT_ASSERT_OK_AND_ASSIGN(InterfaceAddress v4, ChooseInterface(Machine(), "eth1", std::nullopt));
  EXPECT_EQ(v4.address.ToString(), "10.77.0.2");
  MT_ASSERT_OK_AND_ASSIGN(InterfaceAddress v6, ChooseInterface(Machine(), "eth1", Ip("fd00::9")));
  EXPECT_EQ(v6.address.ToString(), "fd00::2");
  MT_ASSERT_OK_AND_ASSIGN(InterfaceAddress held, ChooseInterface(Machine(), "eth1", Ip("fd00::2")));
  EXPECT_EQ(held.address.ToString(), "fd00::2");
  std::vector<InterfaceAddress> only_link_local = {{"eth5", Ip("fe80::5"), true, false},
                                                   {"eth5", Ip("fd00::5"), true, false}};
  MT_ASSERT_OK_AND_ASSIGN(InterfaceAddress global,
                          ChooseInterface(only_link_local, "eth5", Ip("fd00::1")));
  EXPECT_EQ(global.address.ToString(), "fd00::5");
  absl::StatusOr<InterfaceAddress> missing = ChooseInterface(Machine(), "eth9", std::nullopt);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("--interface eth9: no such interface"));
  EXPECT_THAT(missing.status().message(), HasSubstr("lo 127.0.0.1"));
  EXPECT_FALSE(ChooseInterface(Machine(), "eth2", std::nullopt).ok());  // down
}

TEST(DescribeInterfacesTest, ListsNamesAndAddresses) {
  EXPECT_EQ(DescribeInterfaces({}), "none");
  EXPECT_EQ(DescribeInterfaces(
                {{"lo", Ip("127.0.0.1"), true, true}, {"eth0", Ip("10.0.0.1"), false, false}}),
            "lo 127.0.0.1, eth0 10.0.0.1 (down)");
}

}  // namespace
}  // namespace mt::net
