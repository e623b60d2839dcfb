// What every mtctl verb shares: the global options, the connection and exit codes. The
// printers are in output.h, number and time formats in format.h, calls in rpc.h.
//
// Exit codes (scripts rely on them):
//   0 success · 1 the operation failed · 2 bad usage or invalid input · 3 not found ·
//   4 coordinator unreachable · 5 not authenticated · 6 timed out
#ifndef MT_CLIENT_COMMON_H_
#define MT_CLIENT_COMMON_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/output.h"
#include "common/rpc/tls.h"
#include "grpcpp/channel.h"

namespace mt::client {

enum ExitCode {
  kExitOk = 0,
  kExitFailed = 1,
  kExitUsage = 2,
  kExitNotFound = 3,
  kExitUnavailable = 4,
  kExitUnauthenticated = 5,
  kExitTimeout = 6,
};

// Options common to every verb, from flags and the environment.
struct GlobalOptions {
  std::string coordinator;  // --coordinator, else $MT_COORDINATOR, else 127.0.0.1:7070
  std::string token_file;   // --token-file, else $MT_TOKEN_FILE
  // --tls-ca (else $MT_TLS_CA), --tls-cert/--tls-key (else $MT_TLS_CERT/$MT_TLS_KEY).
  rpc::ClientTlsFiles tls;
  // --insecure-allow-plaintext: send the token off loopback without TLS.
  bool insecure_allow_plaintext = false;
  OutputFormat output = OutputFormat::kTable;
};

absl::StatusOr<GlobalOptions> LoadGlobalOptions();
// Whether `arg` is one of the connection flags above (--coordinator, --token-file, --tls-*,
// --insecure-allow-plaintext, either spelling); *takes_value when its value is the next
// argument.
bool IsConnectionFlag(absl::string_view arg, bool* takes_value);
absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const GlobalOptions& options);

// Maps a status to the exit code above.
int ExitCodeFor(const absl::Status& status);
// Prints "mtctl: <message>" (and a hint for unreachable/unauthenticated) to stderr and
// returns the exit code.
int Fail(const absl::Status& status);
// Prints "mtctl: notice: <message>" to stderr: something the user should know that is not an
// error (a flag ignored, a default chosen).
void Notice(absl::string_view message);

}  // namespace mt::client

#endif  // MT_CLIENT_COMMON_H_
