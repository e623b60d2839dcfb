#include "client/common.h"

#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/status_macros.h"
#include "common/rpc/dial.h"

ABSL_FLAG(std::string, coordinator, "",
          "Coordinator host:port (default $MT_COORDINATOR, else 127.0.0.1:7070).");
ABSL_FLAG(std::string, token_file, "", "Bearer token file (default $MT_TOKEN_FILE).");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that the coordinator's certificate must chain to: connect over TLS "
          "(default $MT_TLS_CA).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate for a coordinator that requires one (default $MT_TLS_CERT).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert (default $MT_TLS_KEY).");
ABSL_FLAG(bool, insecure_allow_plaintext, false,
          "Send the bearer token to a non-loopback coordinator without TLS.");
ABSL_FLAG(std::string, o, "table", "Output format: table, json or yaml.");

namespace mt::client {

absl::StatusOr<GlobalOptions> LoadGlobalOptions() {
  GlobalOptions g;
  g.coordinator = absl::GetFlag(FLAGS_coordinator);
  if (g.coordinator.empty()) {
    const char* env = std::getenv("MT_COORDINATOR");
    g.coordinator = env != nullptr && env[0] != '\0' ? env : "127.0.0.1:7070";
  }
  g.token_file = absl::GetFlag(FLAGS_token_file);
  if (g.token_file.empty()) {
    const char* env = std::getenv("MT_TOKEN_FILE");
    if (env != nullptr) g.token_file = env;
  }
  g.tls = rpc::ClientTlsFromEnvironment();
  if (std::string v = absl::GetFlag(FLAGS_tls_ca); !v.empty()) g.tls.ca = v;
  if (std::string v = absl::GetFlag(FLAGS_tls_cert); !v.empty()) g.tls.cert = v;
  if (std::string v = absl::GetFlag(FLAGS_tls_key); !v.empty()) g.tls.key = v;
  g.insecure_allow_plaintext = absl::GetFlag(FLAGS_insecure_allow_plaintext);
  MT_ASSIGN_OR_RETURN(g.output, ParseOutputFormat(absl::GetFlag(FLAGS_o)));
  return g;
}

bool IsConnectionFlag(absl::string_view arg, bool* takes_value) {
  static constexpr absl::string_view kWithValue[] = {"coordinator", "token-file", "token_file",
                                                     "tls-ca",      "tls_ca",     "tls-cert",
                                                     "tls_cert",    "tls-key",    "tls_key"};
  *takes_value = false;
  if (!absl::ConsumePrefix(&arg, "--")) return false;
  if (arg == "insecure-allow-plaintext" || arg == "insecure_allow_plaintext" ||
      absl::StartsWith(arg, "insecure-allow-plaintext=") ||
      absl::StartsWith(arg, "insecure_allow_plaintext=")) {
    return true;
  }
  for (absl::string_view name : kWithValue) {
    if (arg == name) {
      *takes_value = true;
      return true;
    }
    if (absl::StartsWith(arg, name) && arg.size() > name.size() && arg[name.size()] == '=') {
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const GlobalOptions& options) {
  return rpc::Dial(
      {options.coordinator, options.token_file, options.tls, options.insecure_allow_plaintext});
}

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitUsage;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kUnavailable:
      return kExitUnavailable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitUnauthenticated;
    case absl::StatusCode::kDeadlineExceeded:
      return kExitTimeout;
    default:
      return kExitFailed;
  }
}

int Fail(const absl::Status& status) {
  std::string hint;
  if (absl::IsUnavailable(status)) {
    hint = "\n  is mt-coordinator running there? set --coordinator or MT_COORDINATOR";
  } else if (absl::IsUnauthenticated(status)) {
    hint = "\n  the coordinator wants a bearer token: --token-file or MT_TOKEN_FILE";
  }
  std::fprintf(stderr, "mtctl: %s%s\n", std::string(status.message()).c_str(), hint.c_str());
  return ExitCodeFor(status);
}

void Notice(absl::string_view message) {
  std::fprintf(stderr, "mtctl: notice: %s\n", std::string(message).c_str());
}

}  // namespace mt::client
