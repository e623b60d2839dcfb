// Where a rank's collectives talk to other hosts, read from the environment its mt-worker
// gives it (common/net/interfaces.h, RankNetworkEnvironment):
//   MT_ADVERTISE_HOST   the address other ranks dial for this rank's store (rank 0 publishes
//                       it); without it, the local address of the route to the coordinator
//   MT_SOCKET_ADDRESS   the local address Gloo binds (exactly: IPv6-safe)
//   MT_SOCKET_IFNAME    the interface the worker chose
//   GLOO_SOCKET_IFNAME  comma-separated interfaces for Gloo; when the user set it to something
//                       other than MT_SOCKET_IFNAME it wins over MT_SOCKET_ADDRESS
//   MT_RANK_PORT_RANGE  FIRST-LAST ports the store may listen on (firewalls); unset = any
// No LibTorch; thread-safe (values only).
#ifndef MT_WORKER_PARALLEL_RANK_NETWORK_H_
#define MT_WORKER_PARALLEL_RANK_NETWORK_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/net/address.h"

namespace mt::parallel {

struct RankNetwork {
  std::string advertise_host;
  // Gloo's device: interfaces by name when non-empty, else bound to `gloo_address` when
  // non-empty, else Gloo's default (the host name's address).
  std::vector<std::string> gloo_interfaces;
  std::string gloo_address;
  net::PortRange store_ports;  // empty = any free port
};

// `getenv` reads one variable (nullptr = unset); `coordinator` is host:port.
absl::StatusOr<RankNetwork> RankNetworkFromEnvironment(
    const std::function<const char*(const char*)>& getenv, const std::string& coordinator);

}  // namespace mt::parallel

#endif  // MT_WORKER_PARALLEL_RANK_NETWORK_H_
