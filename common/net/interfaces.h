// The system half of mt's addressing (address.h is the pure half): this machine's interfaces,
// the local address of the route toward a peer, and the worker's network choice (which
// interface its ranks use and which address they advertise to other hosts).
// Thread-safe (no shared state).
#ifndef MT_COMMON_NET_INTERFACES_H_
#define MT_COMMON_NET_INTERFACES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/net/address.h"

namespace mt::net {

// Every address of every interface (getifaddrs), IPv4 and IPv6.
absl::StatusOr<std::vector<InterfaceAddress>> ListInterfaces();

// The local address the kernel would send from toward host:port: the host is resolved, a UDP
// socket is connect()ed to it and getsockname() read. No packet is sent.
absl::StatusOr<IpAddress> SourceAddressToward(const std::string& host, int port);

// Where a worker's ranks talk to other hosts.
struct NetworkChoice {
  std::string interface;          // e.g. "eth0" (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME)
  std::string local_address;      // that interface's address: Gloo binds it
  std::string advertise_address;  // what other hosts dial: --advertise-address, else local
};

// The choice for a worker of `coordinator` (host:port): `interface_flag` (name or CIDR; empty =
// the interface of the route to the coordinator) and `advertise_flag` (empty = the interface's
// address). Errors name the flag and the fix.
absl::StatusOr<NetworkChoice> ChooseNetwork(const std::string& coordinator,
                                            const std::string& interface_flag,
                                            const std::string& advertise_flag);

// The environment a rank gets from that choice: MT_ADVERTISE_HOST, MT_SOCKET_ADDRESS,
// MT_SOCKET_IFNAME, and NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME unless `environment` (NAME=VALUE
// strings, the daemon's own) already sets them; MT_RANK_PORT_RANGE when `ports` is not empty.
std::vector<std::string> RankNetworkEnvironment(const NetworkChoice& choice, const PortRange& ports,
                                                const std::vector<std::string>& environment);

}  // namespace mt::net

#endif  // MT_COMMON_NET_INTERFACES_H_
