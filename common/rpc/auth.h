// Bearer-token authentication shared by the daemons and their clients.
//
// A token file holds one token per line (blank lines and '#' comments ignored); any listed
// token is accepted. Clients send "authorization: Bearer <token>" metadata on every call.
// The coordinator checks it at the top of every handler (Authenticator::Check); TLS and roles
// can be layered on later without changing this contract.
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

// Reads the tokens of a token file. Each token is 16..512 printable ASCII characters.
absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path);

// Whether `address` (host:port) listens on loopback only: 127.0.0.0/8, [::1] or localhost.
bool IsLoopbackAddress(absl::string_view address);

// Checks the bearer token of a call. With no tokens configured every call is accepted (the
// daemon then listens on loopback only). The standard health-checking and reflection services
// stay open, as load balancers and grpcurl expect. Thread-safe (immutable).
class Authenticator {
 public:
  explicit Authenticator(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}
  bool enabled() const { return !tokens_.empty(); }
  // OK, or UNAUTHENTICATED saying what is missing.
  grpc::Status Check(const grpc::ServerContext& context) const;

 private:
  std::vector<std::string> tokens_;
};

// How long a channel waits, at most, before it tries to connect again to a server that went
// away. gRPC's own default grows to 120 s: a worker daemon whose coordinator was down for a
// minute would then stay away for another one after it is back, and its ranks count as
// orphans (issue 19). One attempt a second per channel costs a down server nothing.
inline constexpr int kMaxReconnectBackoffMs = 1000;
inline constexpr int kInitialReconnectBackoffMs = 100;

// Channel to `address`, sending `token` as a bearer token when it is not empty, reconnecting
// within kMaxReconnectBackoffMs of its server's return. A call that does not wait for ready
// fails at once while the server is away (with the last connection error) and does not keep
// the channel trying: a caller that must get through as soon as the server is back waits for
// ready (the worker daemon's Register).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const std::string& token);

}  // namespace mt::rpc

#endif  // MT_COMMON_RPC_AUTH_H_
