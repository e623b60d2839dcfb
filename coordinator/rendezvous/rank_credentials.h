// The credentials that confine a rank to its own job's rendezvous keys (issue #20): a worker
// token may call the rendezvous RPCs, but each call must also carry the credential issued with
// the assignment of one rank of that (job, attempt), which only the worker holding the rank
// receives. A worker holding no rank of a job cannot read or write its keys.
//
// A credential is HMAC-SHA256(key, "<job_id>/<attempt>/<rank>") in lower-case hex, under one
// 32-byte key per coordinator that its Store keeps (meta 'rank_credential_key'), so credentials
// hold across coordinator restarts and nothing per rank is stored. A new attempt of the job
// gets new credentials; those of the old one reach only its dropped space.
// Thread-safe (immutable after Create).
#ifndef MT_COORDINATOR_RENDEZVOUS_RANK_CREDENTIALS_H_
#define MT_COORDINATOR_RENDEZVOUS_RANK_CREDENTIALS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt::coordinator {

class RankCredentials {
 public:
  // `key_hex`: 64 lower-case hex digits (rpc::NewWorkerSecret makes one). INVALID_ARGUMENT
  // otherwise.
  static absl::StatusOr<RankCredentials> FromKey(absl::string_view key_hex);

  // The credential of `rank` of `job_id`'s attempt `attempt` (64 hex digits).
  std::string Issue(absl::string_view job_id, int attempt, int rank) const;
  // OK when `presented` is Issue(job_id, attempt, rank), compared in constant time;
  // PERMISSION_DENIED naming the job, attempt and rank otherwise (an empty one says that the
  // call carried none).
  absl::Status Check(absl::string_view job_id, int attempt, int rank,
                     absl::string_view presented) const;

 private:
  explicit RankCredentials(std::string key) : key_(std::move(key)) {}
  std::string key_;  // the 32 raw bytes
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_RENDEZVOUS_RANK_CREDENTIALS_H_
