// Worker identity secrets: the long-lived credential the coordinator issues with a worker id
// (kept by the daemon in its --state-file) and the per-registration session every later
// worker call carries as metadata. The coordinator keeps only SHA-256 digests and compares
// them in constant time. Pure functions; thread-safe.
#ifndef MT_COMMON_RPC_WORKER_CREDENTIAL_H_
#define MT_COMMON_RPC_WORKER_CREDENTIAL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mt::rpc {

// Metadata key of the session on a worker daemon's calls (lower case, as gRPC requires).
inline constexpr char kWorkerSessionHeader[] = "x-mt-worker-session";
// Metadata key of the rank credential on a rank's rendezvous calls (mt.v1.Assignment's
// rank_credential; coordinator/rendezvous/rank_credentials.h).
inline constexpr char kRankCredentialHeader[] = "x-mt-rank-credential";
// Hex digits of a secret (32 random bytes).
inline constexpr size_t kWorkerSecretHexDigits = 64;

// 32 bytes from the operating system's CSPRNG, as lower-case hex.
std::string NewWorkerSecret();
// Lower-case hex SHA-256 of `secret`.
std::string HashWorkerSecret(absl::string_view secret);
// Whether `secret` hashes to `hash` (constant time in the secret's value).
bool WorkerSecretMatches(absl::string_view secret, absl::string_view hash);
// OK when `secret` is 64 lower-case hex digits; INVALID_ARGUMENT naming `field` otherwise.
absl::Status CheckWorkerSecret(absl::string_view secret, absl::string_view field);

}  // namespace mt::rpc

#endif  // MT_COMMON_RPC_WORKER_CREDENTIAL_H_
