// IP addresses, CIDR blocks, host:port strings, port ranges, and the choice of a network
// interface from a list: the pure half of mt's addressing (interfaces.h asks the system).
// No I/O, no global state; thread-safe (values only).
//
// How an interface is chosen (ChooseInterface), for `mt-worker --interface WANT`:
//   WANT empty      -> the interface holding `route_source` (the local address of the route to
//                      the coordinator), never "the first non-loopback interface";
//   WANT a CIDR/IP  -> the interface (up) with an address inside it ("10.77.0.0/24", "fd00::/64",
//                      "10.77.0.2" = /32);
//   WANT a name     -> that interface (up); its address of route_source's family, not link-local,
//                      route_source itself when the interface holds it.
#ifndef MT_COMMON_NET_ADDRESS_H_
#define MT_COMMON_NET_ADDRESS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt::net {

enum class Family { kIpv4, kIpv6 };

struct IpAddress {
  Family family = Family::kIpv4;
  // Network byte order; an IPv4 address uses the first 4 bytes, the rest are zero.
  std::array<uint8_t, 16> bytes = {};

  int size() const { return family == Family::kIpv4 ? 4 : 16; }
  bool is_loopback() const;
  bool is_link_local() const;  // 169.254.0.0/16, fe80::/10
  // "10.77.0.2", "fd00::2" (no brackets).
  std::string ToString() const;
  friend bool operator==(const IpAddress& a, const IpAddress& b) {
    return a.family == b.family && a.bytes == b.bytes;
  }
  friend bool operator!=(const IpAddress& a, const IpAddress& b) { return !(a == b); }
};

// A literal address, IPv4 or IPv6 (brackets allowed: "[fd00::1]"); no names.
absl::StatusOr<IpAddress> ParseIp(absl::string_view text);

struct Cidr {
  IpAddress base;  // with the host bits as written
  int prefix_length = 0;
};

// "10.77.0.0/24", "fd00::/64"; a bare address is a single host (/32, /128).
absl::StatusOr<Cidr> ParseCidr(absl::string_view text);
bool CidrContains(const Cidr& cidr, const IpAddress& address);

struct HostPort {
  std::string host;  // without brackets
  int port = 0;
};

// "host:port", "10.0.0.1:7070", "[fd00::1]:7070"; `field` names the flag in errors. The port
// must be 0..65535 (0 = any free port, allowed only where the caller says so).
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, absl::string_view field);
// host:port, the host bracketed when it is an IPv6 literal.
std::string JoinHostPort(absl::string_view host, int port);

struct PortRange {
  int first = 0;
  int last = 0;  // inclusive
  bool empty() const { return first == 0 && last == 0; }
  int size() const { return empty() ? 0 : last - first + 1; }
};

// "29500-29600" or "29500" (one port); "" = no range (any free port). 1..65535, first <= last.
absl::StatusOr<PortRange> ParsePortRange(absl::string_view text, absl::string_view field);

// One address of one interface, as getifaddrs lists them (an interface with two addresses
// appears twice).
struct InterfaceAddress {
  std::string name;
  IpAddress address;
  bool up = false;
  bool loopback = false;
};

// The choice described at the top of this file. Errors name --interface and list what there
// is to choose from.
absl::StatusOr<InterfaceAddress> ChooseInterface(const std::vector<InterfaceAddress>& interfaces,
                                                 absl::string_view want,
                                                 const std::optional<IpAddress>& route_source);

// "lo 127.0.0.1, eth0 10.77.0.2" (for error messages).
std::string DescribeInterfaces(const std::vector<InterfaceAddress>& interfaces);

}  // namespace mt::net

#endif  // MT_COMMON_NET_ADDRESS_H_
