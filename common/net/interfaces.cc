#include "common/net/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/errors.h"

namespace mt::net {
namespace {

std::optional<IpAddress> FromSockaddr(const sockaddr* sa) {
  if (sa == nullptr) return std::nullopt;
  IpAddress out;
  if (sa->sa_family == AF_INET) {
    std::memcpy(out.bytes.data(), &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, 4);
    return out;
  }
  if (sa->sa_family == AF_INET6) {
    out.family = Family::kIpv6;
    std::memcpy(out.bytes.data(), &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
    return out;
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::vector<InterfaceAddress>> ListInterfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return ErrnoStatus("listing the network interfaces", "", errno);
  std::vector<InterfaceAddress> out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    std::optional<IpAddress> ip = FromSockaddr(a->ifa_addr);
    if (!ip) continue;
    InterfaceAddress i;
    i.name = a->ifa_name;
    i.address = *ip;
    i.up = (a->ifa_flags & IFF_UP) != 0 && (a->ifa_flags & IFF_RUNNING) != 0;
    i.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(i));
  }
  ::freeifaddrs(list);
  return out;
}

absl::StatusOr<IpAddress> SourceAddressToward(const std::string& host, int port) {
  addrinfo hints = {};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port > 0 ? port : 9);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", ::gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("'", host, "' has no address"));
  std::optional<IpAddress> out;
  for (addrinfo* a = found; a != nullptr && !out; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local = {};
    socklen_t length = sizeof(local);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      last = ErrnoStatus("no route to", host, errno);
    } else if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      out = FromSockaddr(reinterpret_cast<const sockaddr*>(&local));
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (!out) return last;
  return *out;
}

absl::StatusOr<NetworkChoice> ChooseNetwork(const std::string& coordinator,
                                            const std::string& interface_flag,
                                            const std::string& advertise_flag) {
  absl::StatusOr<HostPort> target = ParseHostPort(coordinator, "--coordinator");
  if (!target.ok()) return target.status();
  absl::StatusOr<std::vector<InterfaceAddress>> interfaces = ListInterfaces();
  if (!interfaces.ok()) return interfaces.status();
  absl::StatusOr<IpAddress> source = SourceAddressToward(target->host, target->port);
  if (!source.ok() && interface_flag.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot find the interface toward the coordinator ", coordinator, ": ",
        source.status().message(), "; name one with --interface (a name or a CIDR block)"));
  }
  absl::StatusOr<InterfaceAddress> chosen = ChooseInterface(
      *interfaces, interface_flag, source.ok() ? std::optional<IpAddress>(*source) : std::nullopt);
  if (!chosen.ok()) return chosen.status();
  NetworkChoice out;
  out.interface = chosen->name;
  out.local_address = chosen->address.ToString();
  out.advertise_address = out.local_address;
  if (!advertise_flag.empty()) {
    absl::string_view host = advertise_flag;
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    if (host.find_first_of(" /") != absl::string_view::npos ||
        (host.find(':') != absl::string_view::npos && !ParseIp(host).ok())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--advertise-address '", advertise_flag,
          "' must be an address or a host name other hosts can reach (no port), e.g. 10.77.0.2"));
    }
    out.advertise_address = std::string(host);
  }
  return out;
}

std::vector<std::string> RankNetworkEnvironment(const NetworkChoice& choice, const PortRange& ports,
                                                const std::vector<std::string>& environment) {
  const auto is_set = [&](absl::string_view name) {
    for (const std::string& kv : environment) {
      if (absl::StartsWith(kv, absl::StrCat(name, "="))) return true;
    }
    return false;
  };
  std::vector<std::string> out = {
      absl::StrCat("MT_ADVERTISE_HOST=", choice.advertise_address),
      absl::StrCat("MT_SOCKET_ADDRESS=", choice.local_address),
      absl::StrCat("MT_SOCKET_IFNAME=", choice.interface),
  };
  for (const char* name : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    if (!is_set(name)) out.push_back(absl::StrCat(name, "=", choice.interface));
  }
  if (!ports.empty()) {
    out.push_back(absl::StrCat("MT_RANK_PORT_RANGE=", ports.first, "-", ports.last));
  }
  return out;
}

}  // namespace mt::net
