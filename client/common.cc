#include "client/common.h"

#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/rpc/auth.h"

ABSL_FLAG(std::string, coordinator, "",
          "Coordinator host:port (default $MT_COORDINATOR, else 127.0.0.1:7070).");
ABSL_FLAG(std::string, token_file, "", "Bearer token file (default $MT_TOKEN_FILE).");
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
  MT_ASSIGN_OR_RETURN(g.output, ParseOutputFormat(absl::GetFlag(FLAGS_o)));
  return g;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const GlobalOptions& options) {
  std::string token;
  if (!options.token_file.empty()) {
    auto tokens = rpc::ReadTokenFile(options.token_file);
    if (!tokens.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: ", tokens.status().message()));
    }
    token = tokens->front();
  }
  return rpc::MakeChannel(options.coordinator, token);
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
