// A multi-host test rig on one machine: network namespaces joined by a bridge, each one a
// "node" with its own addresses (10.77.0.0/24 and fd00:77::/64, inside namespaces this rig
// creates) and its own loopback. The bridge lives in a namespace of its own ("hub"): nothing in the
// machine's own namespace is touched. Everything is removed on destruction, also after a failed
// test. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2; Create says why when it cannot. Not
// thread-safe: one test thread drives a rig.
#ifndef MT_TESTS_TESTUTIL_NETNS_RIG_H_
#define MT_TESTS_TESTUTIL_NETNS_RIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mt::testutil {

class NetnsRig {
 public:
  // Creates `nodes` namespaces; node i gets 10.77.0.(i+1)/24 and fd00:77::(i+1)/64 on its eth0.
  // The namespaces are named PREFIX<pid>-hub and PREFIX<pid>-n<i> (so that a script can find
  // and remove those of a run that was killed before its destructor ran).
  static absl::StatusOr<NetnsRig> Create(int nodes, const std::string& prefix = "mt");
  NetnsRig(NetnsRig&& other) noexcept;
  NetnsRig& operator=(NetnsRig&&) = delete;
  ~NetnsRig();

  int size() const { return static_cast<int>(namespaces_.size()); }
  const std::string& ns(int node) const { return namespaces_[node]; }
  static std::string Address(int node);
  static std::string Address6(int node);  // without brackets
  // argv run inside node's namespace: ip netns exec NS argv...
  std::vector<std::string> In(int node, std::vector<std::string> argv) const;
  // Cuts (false) or restores (true) node's link to the bridge.
  absl::Status SetLink(int node, bool up);

 private:
  NetnsRig() = default;
  std::string hub_;
  std::vector<std::string> namespaces_;
};

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_NETNS_RIG_H_
