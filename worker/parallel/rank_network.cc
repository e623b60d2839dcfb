#include "worker/parallel/rank_network.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/net/interfaces.h"

namespace mt::parallel {

absl::StatusOr<RankNetwork> RankNetworkFromEnvironment(
    const std::function<const char*(const char*)>& getenv, const std::string& coordinator) {
  const auto var = [&](const char* name) {
    const char* v = getenv(name);
    return std::string(v == nullptr ? "" : v);
  };
  RankNetwork out;
  out.advertise_host = var("MT_ADVERTISE_HOST");
  if (out.advertise_host.empty()) {
    absl::StatusOr<net::HostPort> target = net::ParseHostPort(coordinator, "the coordinator");
    if (!target.ok()) return target.status();
    absl::StatusOr<net::IpAddress> source = net::SourceAddressToward(target->host, target->port);
    if (!source.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("no address to advertise to the other ranks: ", source.status().message(),
                       "; set MT_ADVERTISE_HOST (mt-worker --advertise-address)"));
    }
    out.advertise_host = source->ToString();
  }
  const std::string gloo_ifname = var("GLOO_SOCKET_IFNAME");
  const std::string our_ifname = var("MT_SOCKET_IFNAME");
  out.gloo_address = var("MT_SOCKET_ADDRESS");
  if (!gloo_ifname.empty() && (gloo_ifname != our_ifname || out.gloo_address.empty())) {
    out.gloo_interfaces = absl::StrSplit(gloo_ifname, ',', absl::SkipEmpty());
    out.gloo_address.clear();
  }
  absl::StatusOr<net::PortRange> ports =
      net::ParsePortRange(var("MT_RANK_PORT_RANGE"), "MT_RANK_PORT_RANGE (--rank-port-range)");
  if (!ports.ok()) return ports.status();
  out.store_ports = *ports;
  return out;
}

}  // namespace mt::parallel
