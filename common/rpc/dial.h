// Dialling the coordinator, written once for mtctl, mt-worker and the ranks: the token file's
// first token, TLS credentials, and the refusal to send a token in plaintext off loopback
// (common/rpc/tls.h). Stateless; thread-safe.
#ifndef MT_COMMON_RPC_DIAL_H_
#define MT_COMMON_RPC_DIAL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/rpc/tls.h"
#include "grpcpp/channel.h"

namespace mt::rpc {

struct DialOptions {
  std::string address;     // host:port of the coordinator
  std::string token_file;  // "" = send no token
  ClientTlsFiles tls;      // !enabled() = plaintext
  bool insecure_allow_plaintext = false;
};

// The channel, or InvalidArgument naming the token file, the PEM file or the transport rule.
// The channel connects lazily: an unreachable coordinator shows on the first call.
absl::StatusOr<std::shared_ptr<grpc::Channel>> Dial(const DialOptions& options);

}  // namespace mt::rpc

#endif  // MT_COMMON_RPC_DIAL_H_
