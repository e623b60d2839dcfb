// TLS credentials for the coordinator's gRPC port and for those who dial it (mtctl, mt-worker,
// the ranks' rendezvous client). gRPC's own SSL (OpenSSL/BoringSSL underneath); PEM files only.
//
// Policy (docs/security.md): a coordinator listening off loopback needs bearer tokens and TLS
// (--tls-cert/--tls-key) unless --insecure-allow-plaintext; a client does not send a token in
// plaintext to an address off loopback unless told to (--insecure-allow-plaintext).
// Stateless; thread-safe.
#ifndef MT_COMMON_RPC_TLS_H_
#define MT_COMMON_RPC_TLS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace mt::rpc {

// The server side: its certificate chain and key, and optionally the CA that client
// certificates must chain to (then a client without a valid certificate is refused: mutual TLS).
struct ServerTlsFiles {
  std::string cert;       // PEM certificate chain; "" = plaintext
  std::string key;        // PEM private key
  std::string client_ca;  // PEM CA bundle for client certificates; "" = none asked for
  bool enabled() const { return !cert.empty(); }
};

// The client side: the CA that the server's certificate must chain to, and for mutual TLS
// the client's own certificate and key.
struct ClientTlsFiles {
  std::string ca;    // PEM CA bundle; "" = plaintext
  std::string cert;  // PEM client certificate chain (mutual TLS); "" = none
  std::string key;   // PEM private key of `cert`
  bool enabled() const { return !ca.empty(); }
};

// Checks the combination (both of cert/key or neither; a client CA only with a certificate),
// naming the flags.
absl::Status ValidateServerTls(const ServerTlsFiles& files);
absl::Status ValidateClientTls(const ClientTlsFiles& files);

// Reads the PEM files; errors name the file. Plaintext when !enabled().
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files);

// Refuses to send `token` in plaintext off loopback, unless `allow_plaintext`.
absl::Status CheckTokenTransport(const std::string& address, bool has_token, bool tls,
                                 bool allow_plaintext);

// The environment that carries ClientTlsFiles from mt-worker to its ranks (MT_TLS_CA,
// MT_TLS_CERT, MT_TLS_KEY), and back.
std::vector<std::string> ClientTlsEnvironment(const ClientTlsFiles& files);
ClientTlsFiles ClientTlsFromEnvironment();

}  // namespace mt::rpc

#endif  // MT_COMMON_RPC_TLS_H_
