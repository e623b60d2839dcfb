// Bearer-token authentication and role-based authorisation shared by the daemons and their
// clients.
//
// Token file (docs/security.md): one entry per line, blank lines and '#' comments ignored:
//   ROLE NAME TOKEN    e.g. "submit alice 3f9a..."; NAME is who the coordinator records
//   ROLE TOKEN         the name is then the role itself
//   TOKEN              (the format before roles) = "admin admin TOKEN"
// ROLE is one of admin, submit, read, worker. Clients send the first entry's token as
// "authorization: Bearer <token>" on every call. The coordinator checks it at the top of every
// handler against the role the method needs (Authenticator::Check).
#ifndef MT_COMMON_RPC_AUTH_H_
#define MT_COMMON_RPC_AUTH_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace mt::rpc {

// What a token may do. Ordered by nothing: use Allows().
enum class Role { kAdmin, kSubmit, kRead, kWorker };

// What a method needs (coordinator/rpc_roles.h holds the table of every method).
enum class Access {
  kRead,    // read, submit, admin
  kSubmit,  // submit, admin
  kAdmin,   // admin only
  kWorker,  // worker, admin (the worker service)
};

absl::string_view RoleName(Role role);
absl::StatusOr<Role> ParseRole(absl::string_view name);
absl::string_view AccessName(Access access);
// Whether a token of `role` may call a method that needs `access`.
bool Allows(Role role, Access access);

struct TokenEntry {
  Role role = Role::kAdmin;
  std::string name;
  std::string token;
};

// Who made a call: the name and role of its token's entry. Without tokens (loopback, no
// --auth-token-file) every caller is {"", admin}.
struct Principal {
  std::string name;
  Role role = Role::kAdmin;
};

// Reads a token file (format above). Each token is 16..512 printable ASCII characters; names
// are 1..64 of [A-Za-z0-9._@-]; a token may appear once.
absl::StatusOr<std::vector<TokenEntry>> ReadTokenTable(const std::string& path);
// The tokens of a token file, in order (what clients send: the first).
absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path);

// Equal bytes, compared in time that depends only on the sizes (for secrets).
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// Whether `address` (host:port) listens on loopback only: 127.0.0.0/8, [::1] or localhost.
bool IsLoopbackAddress(absl::string_view address);

// Checks the bearer token of a call and its role. With no tokens configured every call is
// accepted (the daemon then listens on loopback only). The standard health-checking service
// stays open, as load balancers expect. Thread-safe (immutable).
class Authenticator {
 public:
  explicit Authenticator(std::vector<TokenEntry> tokens) : tokens_(std::move(tokens)) {}
  bool enabled() const { return !tokens_.empty(); }
  // OK, UNAUTHENTICATED saying what is missing, or PERMISSION_DENIED naming the role needed.
  // On OK, `caller` (optional) receives who made the call.
  grpc::Status Check(const grpc::ServerContext& context, absl::string_view method, Access access,
                     Principal* caller = nullptr) const;

 private:
  const TokenEntry* Find(const grpc::ServerContext& context, grpc::Status* error) const;
  std::vector<TokenEntry> tokens_;
};

// How long a channel waits, at most, before it tries to connect again to a server that went
// away. gRPC's own default grows to 120 s: a worker daemon whose coordinator was down for a
// minute would then stay away for another one after it is back, and its ranks count as
// orphans (issue 19). One attempt a second per channel costs a down server nothing.
inline constexpr int kMaxReconnectBackoffMs = 1000;
inline constexpr int kInitialReconnectBackoffMs = 100;

// How a channel finds out that its connection is dead when the network, not the server, went
// away (a cut link, a peer host that lost power): no TCP reset comes, and without pings the
// channel would keep the connection and queue its calls behind TCP's retransmission backoff,
// which grows to several seconds during an outage and goes on after the link is back. A worker
// daemon's heartbeats would then stop for longer than the coordinator's --lost_after right after
// it registered again, and its job would restart twice for one cut (tests/multinode). With a
// ping every kKeepaliveTimeMs that must be answered within kKeepaliveTimeoutMs, the dead
// connection is closed during the outage and a fresh one is made when the network returns,
// trying again at least every kMinConnectTimeoutMs (gRPC's default waits 20 s on one attempt).
inline constexpr int kKeepaliveTimeMs = 1000;
inline constexpr int kKeepaliveTimeoutMs = 3000;
inline constexpr int kMinConnectTimeoutMs = 3000;

// What a server accepts from the channels above: pings every kKeepaliveTimeMs, with or without
// calls in flight (gRPC's default turns a client away after a few pings less than 5 minutes
// apart); and its own pings, so that it drops the streams of a client that is gone.
void AllowKeepalivePings(grpc::ServerBuilder* builder);

// Channel to `address` over `credentials` (nullptr = plaintext), sending `token` as a bearer
// token when it is not empty, reconnecting within kMaxReconnectBackoffMs of its server's
// return and closing a connection whose pings go unanswered (kKeepaliveTimeMs). A call that does
// not wait for ready fails at once while the server is away (with the last connection error) and
// does not keep the channel trying: a caller that must get through as soon as the server is back
// waits for ready (the worker daemon's Register).
std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address, const std::string& token,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

}  // namespace mt::rpc

#endif  // MT_COMMON_RPC_AUTH_H_
