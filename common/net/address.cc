#include "common/net/address.h"

#include <arpa/inet.h>

#include <cctype>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mt::net {

bool IpAddress::is_loopback() const {
  if (family == Family::kIpv4) return bytes[0] == 127;
  static constexpr std::array<uint8_t, 16> kV6Loopback = {0, 0, 0, 0, 0, 0, 0, 0,
                                                          0, 0, 0, 0, 0, 0, 0, 1};
  return bytes == kV6Loopback;
}

bool IpAddress::is_link_local() const {
  if (family == Family::kIpv4) return bytes[0] == 169 && bytes[1] == 254;
  return bytes[0] == 0xfe && (bytes[1] & 0xc0) == 0x80;
}

std::string IpAddress::ToString() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  const int af = family == Family::kIpv4 ? AF_INET : AF_INET6;
  if (::inet_ntop(af, bytes.data(), buf, sizeof(buf)) == nullptr) return "?";
  return buf;
}

absl::StatusOr<IpAddress> ParseIp(absl::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  const std::string s(text);
  IpAddress out;
  if (s.find(':') == std::string::npos) {
    if (::inet_pton(AF_INET, s.c_str(), out.bytes.data()) == 1) return out;
  } else if (::inet_pton(AF_INET6, s.c_str(), out.bytes.data()) == 1) {
    out.family = Family::kIpv6;
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not an IP address (e.g. 10.77.0.2 or fd00::2)"));
}

absl::StatusOr<Cidr> ParseCidr(absl::string_view text) {
  const size_t slash = text.find('/');
  absl::StatusOr<IpAddress> base = ParseIp(text.substr(0, slash));
  if (!base.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a CIDR block (e.g. 10.77.0.0/24 or fd00::/64)"));
  }
  Cidr out;
  out.base = *base;
  out.prefix_length = base->size() * 8;
  if (slash == absl::string_view::npos) return out;
  int length = -1;
  if (!absl::SimpleAtoi(text.substr(slash + 1), &length) || length < 0 ||
      length > base->size() * 8 || text.substr(slash + 1).empty() ||
      !std::isdigit(static_cast<unsigned char>(text[slash + 1]))) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': the prefix length must be 0..", base->size() * 8));
  }
  out.prefix_length = length;
  return out;
}

bool CidrContains(const Cidr& cidr, const IpAddress& address) {
  if (cidr.base.family != address.family) return false;
  int bits = cidr.prefix_length;
  for (int i = 0; i < address.size() && bits > 0; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((cidr.base.bytes[i] & mask) != (address.bytes[i] & mask)) return false;
  }
  return true;
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, absl::string_view field) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(field, " '", text, "': ", why,
                                                   " (host:port, e.g. 10.77.0.1:7070 or "
                                                   "[fd00::1]:7070)"));
  };
  HostPort out;
  absl::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) return bad("unclosed '['");
    out.host = std::string(text.substr(1, close - 1));
    if (text.substr(close + 1, 1) != ":") return bad("no port after the bracketed address");
    port = text.substr(close + 2);
    if (!ParseIp(out.host).ok()) return bad("brackets hold an IPv6 address");
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) return bad("no port");
    out.host = std::string(text.substr(0, colon));
    if (out.host.find(':') != std::string::npos) return bad("an IPv6 address needs brackets");
    port = text.substr(colon + 1);
  }
  if (out.host.empty()) return bad("no host");
  if (port.empty() || !std::isdigit(static_cast<unsigned char>(port[0])) ||
      !absl::SimpleAtoi(port, &out.port) || out.port < 0 || out.port > 65535) {
    return bad("the port must be 0..65535");
  }
  return out;
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<PortRange> ParsePortRange(absl::string_view text, absl::string_view field) {
  if (text.empty()) return PortRange{};
  const size_t dash = text.find('-');
  const absl::string_view a = text.substr(0, dash);
  const absl::string_view b = dash == absl::string_view::npos ? a : text.substr(dash + 1);
  PortRange r;
  const auto port = [](absl::string_view s, int* v) {
    return !s.empty() && std::isdigit(static_cast<unsigned char>(s[0])) && absl::SimpleAtoi(s, v) &&
           *v >= 1 && *v <= 65535;
  };
  if (!port(a, &r.first) || !port(b, &r.last) || r.first > r.last) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " '", text,
                     "' must be FIRST-LAST with 1 <= FIRST <= LAST <= 65535, e.g. 29500-29600"));
  }
  return r;
}

std::string DescribeInterfaces(const std::vector<InterfaceAddress>& interfaces) {
  if (interfaces.empty()) return "none";
  return absl::StrJoin(interfaces, ", ", [](std::string* out, const InterfaceAddress& i) {
    absl::StrAppend(out, i.name, " ", i.address.ToString(), i.up ? "" : " (down)");
  });
}

namespace {

// The best address of the interface named `name`: route_source when it holds it, else the
// first of route_source's family (IPv4 without a route) that is not link-local.
const InterfaceAddress* BestOfNamed(const std::vector<InterfaceAddress>& interfaces,
                                    absl::string_view name,
                                    const std::optional<IpAddress>& route_source) {
  const Family family = route_source ? route_source->family : Family::kIpv4;
  const InterfaceAddress* best = nullptr;
  int best_score = -1;
  for (const InterfaceAddress& i : interfaces) {
    if (i.name != name || !i.up) continue;
    int score = 0;
    if (route_source && i.address == *route_source) score += 4;
    if (i.address.family == family) score += 2;
    if (!i.address.is_link_local()) score += 1;
    if (score > best_score) best = &i, best_score = score;
  }
  return best;
}

}  // namespace

absl::StatusOr<InterfaceAddress> ChooseInterface(const std::vector<InterfaceAddress>& interfaces,
                                                 absl::string_view want,
                                                 const std::optional<IpAddress>& route_source) {
  const std::string have = DescribeInterfaces(interfaces);
  if (want.empty()) {
    if (!route_source) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no route to the coordinator to take the interface from: name one with --interface "
          "(a name or a CIDR block); this machine has: ",
          have));
    }
    for (const InterfaceAddress& i : interfaces) {
      if (i.address == *route_source) return i;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "the route to the coordinator leaves from ", route_source->ToString(),
        ", which no interface holds: name one with --interface; this machine has: ", have));
  }
  if (absl::StatusOr<Cidr> cidr = ParseCidr(want);
      cidr.ok() && (want.find('/') != absl::string_view::npos || ParseIp(want).ok())) {
    for (const InterfaceAddress& i : interfaces) {
      if (i.up && CidrContains(*cidr, i.address)) return i;
    }
    return absl::NotFoundError(absl::StrCat("--interface ", want,
                                            ": no interface that is up has an address in it; "
                                            "this machine has: ",
                                            have));
  }
  if (const InterfaceAddress* i = BestOfNamed(interfaces, want, route_source)) return *i;
  return absl::NotFoundError(
      absl::StrCat("--interface ", want,
                   ": no such interface that is up with an address (a name, or a CIDR block "
                   "such as 10.77.0.0/24); this machine has: ",
                   have));
}

}  // namespace mt::net
