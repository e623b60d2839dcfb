#include "common/rpc/worker_credential.h"

#include <openssl/rand.h>
#include <openssl/sha.h>

#include <cstdint>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/rpc/auth.h"

namespace mt::rpc {

std::string NewWorkerSecret() {
  unsigned char bytes[kWorkerSecretHexDigits / 2];
  // RAND_bytes fails only when the OS gives no entropy; no secret may be made then.
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    MT_LOG(ERROR) << "the system's random source failed; cannot issue a worker credential";
    std::abort();
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

std::string HashWorkerSecret(absl::string_view secret) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

bool WorkerSecretMatches(absl::string_view secret, absl::string_view hash) {
  return ConstantTimeEquals(HashWorkerSecret(secret), hash);
}

absl::Status CheckWorkerSecret(absl::string_view secret, absl::string_view field) {
  bool ok = secret.size() == kWorkerSecretHexDigits;
  for (char c : secret) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " must be the ", kWorkerSecretHexDigits,
      " lower-case hex digits the coordinator issued (got ", secret.size(), " bytes)"));
}

}  // namespace mt::rpc
