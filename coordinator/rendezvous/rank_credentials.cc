#include "coordinator/rendezvous/rank_credentials.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/auth.h"
#include "common/rpc/worker_credential.h"

namespace mt::coordinator {

absl::StatusOr<RankCredentials> RankCredentials::FromKey(absl::string_view key_hex) {
  if (absl::Status s = rpc::CheckWorkerSecret(key_hex, "rank_credential_key"); !s.ok()) return s;
  return RankCredentials(absl::HexStringToBytes(key_hex));
}

std::string RankCredentials::Issue(absl::string_view job_id, int attempt, int rank) const {
  const std::string message = absl::StrCat(job_id, "/", attempt, "/", rank);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &size);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), size));
}

absl::Status RankCredentials::Check(absl::string_view job_id, int attempt, int rank,
                                    absl::string_view presented) const {
  const std::string what =
      absl::StrCat("rendezvous of ", job_id, " attempt ", attempt, " rank ", rank);
  if (presented.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, ": the call carries no ", rpc::kRankCredentialHeader,
        "; rendezvous calls come from the ranks this coordinator assigned (their "
        "Assignment.rank_credential; an mt-worker older than the coordinator sends none)"));
  }
  if (!rpc::ConstantTimeEquals(Issue(job_id, attempt, rank), presented)) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, ": the call's ", rpc::kRankCredentialHeader,
        " is not the one issued to that rank; a worker reaches only the rendezvous of the ranks "
        "it holds"));
  }
  return absl::OkStatus();
}

}  // namespace mt::coordinator
