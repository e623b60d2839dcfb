#include "tests/testutil/netns_rig.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/testutil/subprocess.h"

namespace mt::testutil {
namespace {

absl::Status Ip(std::vector<std::string> args) {
  args.insert(args.begin(), "/usr/sbin/ip");
  absl::StatusOr<CommandResult> r = RunCommand(args, absl::Seconds(20));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(absl::StrJoin(args, " "), ": ", r->err, r->out));
  }
  return absl::OkStatus();
}

}  // namespace

std::string NetnsRig::Address(int node) { return absl::StrCat("10.77.0.", node + 1); }

std::string NetnsRig::Address6(int node) { return absl::StrCat("fd00:77::", node + 1); }

absl::StatusOr<NetnsRig> NetnsRig::Create(int nodes, const std::string& name_prefix) {
  NetnsRig rig;
  const std::string prefix = absl::StrCat(name_prefix, ::getpid(), "-");
  rig.hub_ = prefix + "hub";
  if (absl::Status s = Ip({"netns", "add", rig.hub_}); !s.ok()) {
    rig.hub_.clear();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create network namespaces (needs root and iproute2): ", s.message()));
  }
  const auto hub = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"-n", rig.hub_});
    return Ip(std::move(args));
  };
  if (absl::Status s = hub({"link", "add", "br0", "type", "bridge"}); !s.ok()) return s;
  if (absl::Status s = hub({"link", "set", "br0", "up"}); !s.ok()) return s;
  for (int i = 0; i < nodes; ++i) {
    const std::string ns = absl::StrCat(prefix, "n", i);
    if (absl::Status s = Ip({"netns", "add", ns}); !s.ok()) return s;
    rig.namespaces_.push_back(ns);
    const std::string port = absl::StrCat("v", i);
    for (const std::vector<std::string>& step : std::vector<std::vector<std::string>>{
             {"-n", rig.hub_, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
              ns},
             {"-n", rig.hub_, "link", "set", port, "master", "br0", "up"},
             {"-n", ns, "addr", "add", Address(i) + "/24", "dev", "eth0"},
             // nodad: usable at once, not after duplicate address detection (~2 s).
             {"-n", ns, "addr", "add", Address6(i) + "/64", "dev", "eth0", "nodad"},
             {"-n", ns, "link", "set", "eth0", "up"},
             {"-n", ns, "link", "set", "lo", "up"}}) {
      if (absl::Status s = Ip(step); !s.ok()) return s;
    }
  }
  return rig;
}

NetnsRig::NetnsRig(NetnsRig&& other) noexcept
    : hub_(std::move(other.hub_)), namespaces_(std::move(other.namespaces_)) {
  other.hub_.clear();
  other.namespaces_.clear();
}

NetnsRig::~NetnsRig() {
  // Deleting a namespace deletes its end of every veth pair, and so the pair.
  for (const std::string& ns : namespaces_) (void)Ip({"netns", "del", ns});
  if (!hub_.empty()) (void)Ip({"netns", "del", hub_});
}

std::vector<std::string> NetnsRig::In(int node, std::vector<std::string> argv) const {
  argv.insert(argv.begin(), {"/usr/sbin/ip", "netns", "exec", namespaces_[node]});
  return argv;
}

absl::Status NetnsRig::SetLink(int node, bool up) {
  return Ip({"-n", hub_, "link", "set", absl::StrCat("v", node), up ? "up" : "down"});
}

}  // namespace mt::testutil
