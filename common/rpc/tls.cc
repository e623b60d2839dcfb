#include "common/rpc/tls.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"
#include "common/rpc/auth.h"
#include "grpcpp/security/server_credentials.h"

namespace mt::rpc {
namespace {

constexpr uint64_t kMaxPemBytes = 1 << 20;

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  absl::StatusOr<std::string> pem = ReadFile(path, kMaxPemBytes);
  if (!pem.ok()) return Annotate(pem.status(), flag);
  if (pem->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": not a PEM file (no '-----BEGIN' line)"));
  }
  return pem;
}

}  // namespace

absl::Status ValidateServerTls(const ServerTlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both or neither");
  }
  if (!files.client_ca.empty() && files.cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS first");
  }
  return absl::OkStatus();
}

absl::Status ValidateClientTls(const ClientTlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together: give both or neither");
  }
  if (!files.cert.empty() && files.ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert needs --tls-ca: the CA that the coordinator's certificate is checked against");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsFiles& files) {
  MT_RETURN_IF_ERROR(ValidateServerTls(files));
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  MT_ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(files.cert, "--tls-cert"));
  MT_ASSIGN_OR_RETURN(pair.private_key, ReadPem(files.key, "--tls-key"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!files.client_ca.empty()) {
    MT_ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(files.client_ca, "--tls-client-ca"));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files) {
  MT_RETURN_IF_ERROR(ValidateClientTls(files));
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  MT_ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem(files.ca, "--tls-ca"));
  if (!files.cert.empty()) {
    MT_ASSIGN_OR_RETURN(options.pem_cert_chain, ReadPem(files.cert, "--tls-cert"));
    MT_ASSIGN_OR_RETURN(options.pem_private_key, ReadPem(files.key, "--tls-key"));
  }
  return grpc::SslCredentials(options);
}

absl::Status CheckTokenTransport(const std::string& address, bool has_token, bool tls,
                                 bool allow_plaintext) {
  if (!has_token || tls || allow_plaintext || IsLoopbackAddress(address)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "refusing to send a bearer token in plaintext to ", address,
      ": pass --tls-ca with the CA of the coordinator's certificate (or, on a network you "
      "trust, --insecure-allow-plaintext)"));
}

std::vector<std::string> ClientTlsEnvironment(const ClientTlsFiles& files) {
  std::vector<std::string> env;
  if (!files.ca.empty()) env.push_back("MT_TLS_CA=" + files.ca);
  if (!files.cert.empty()) env.push_back("MT_TLS_CERT=" + files.cert);
  if (!files.key.empty()) env.push_back("MT_TLS_KEY=" + files.key);
  return env;
}

ClientTlsFiles ClientTlsFromEnvironment() {
  auto get = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr ? v : "");
  };
  return ClientTlsFiles{get("MT_TLS_CA"), get("MT_TLS_CERT"), get("MT_TLS_KEY")};
}

}  // namespace mt::rpc
