#include "worker/parallel/rendezvous_client.h"

#include <cstdlib>
#include <utility>

#include "absl/time/clock.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/worker_credential.h"
#include "google/protobuf/util/time_util.h"

namespace mt::parallel {

using google::protobuf::util::TimeUtil;

namespace {

constexpr absl::Duration kRetryPause = absl::Milliseconds(200);

// A coordinator that restarts (an upgrade, a crash) is back within seconds; the ranks that join
// meanwhile wait for it, up to the call's deadline, instead of failing at once with "failed to
// connect" or "Socket closed" (a connection that died with the old coordinator), which cost the
// job a restart (found by the chaos soak, tests/chaos). `call` makes one RPC on the context it
// is given (RendezvousClient::Prepare sets its deadline); only idempotent calls come here (Set
// of the same value, Get).
template <typename Call>
absl::Status CallWhileUnavailable(absl::Time deadline, Call call) {
  while (true) {
    grpc::ClientContext context;
    const absl::Status s = call(&context);
    if (!absl::IsUnavailable(s) || absl::Now() + kRetryPause >= deadline) return s;
    absl::SleepFor(kRetryPause);
  }
}

}  // namespace

RendezvousClient::RendezvousClient(std::shared_ptr<grpc::Channel> channel, std::string job_id,
                                   int attempt, int rank, std::string credential)
    : stub_(mt::v1::WorkerService::NewStub(std::move(channel))),
      job_id_(std::move(job_id)),
      attempt_(attempt),
      rank_(rank),
      credential_(std::move(credential)) {}

void RendezvousClient::Prepare(grpc::ClientContext* context, absl::Time deadline) const {
  context->set_deadline(absl::ToChronoTime(deadline));
  context->set_wait_for_ready(true);
  if (!credential_.empty()) context->AddMetadata(rpc::kRankCredentialHeader, credential_);
}

absl::Status RendezvousClient::Set(const std::string& key, const std::string& value) {
  mt::v1::RendezvousSetRequest request;
  request.set_job_id(job_id_);
  request.set_attempt(attempt_);
  request.set_rank(rank_);
  request.set_key(key);
  request.set_value(value);
  mt::v1::RendezvousSetResponse response;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  return CallWhileUnavailable(deadline, [&](grpc::ClientContext* context) {
    Prepare(context, deadline);
    return rpc::FromGrpcStatus(stub_->RendezvousSet(context, request, &response));
  });
}

absl::StatusOr<std::vector<std::string>> RendezvousClient::Get(const std::vector<std::string>& keys,
                                                               absl::Duration timeout) {
  mt::v1::RendezvousGetRequest request;
  request.set_job_id(job_id_);
  request.set_attempt(attempt_);
  request.set_rank(rank_);
  for (const auto& k : keys) request.add_keys(k);
  *request.mutable_timeout() = TimeUtil::NanosecondsToDuration(absl::ToInt64Nanoseconds(timeout));
  mt::v1::RendezvousGetResponse response;
  const absl::Time deadline = absl::Now() + timeout + absl::Seconds(10);
  const absl::Status s = CallWhileUnavailable(deadline, [&](grpc::ClientContext* context) {
    Prepare(context, deadline);
    return rpc::FromGrpcStatus(stub_->RendezvousGet(context, request, &response));
  });
  if (!s.ok()) return s;
  return std::vector<std::string>(response.values().begin(), response.values().end());
}

absl::StatusOr<int64_t> RendezvousClient::Add(const std::string& key, int64_t delta) {
  mt::v1::RendezvousAddRequest request;
  request.set_job_id(job_id_);
  request.set_attempt(attempt_);
  request.set_rank(rank_);
  request.set_key(key);
  request.set_delta(delta);
  mt::v1::RendezvousAddResponse response;
  grpc::ClientContext context;
  Prepare(&context, absl::Now() + absl::Seconds(30));  // not retried: an Add may have counted
  absl::Status s = rpc::FromGrpcStatus(stub_->RendezvousAdd(&context, request, &response));
  if (!s.ok()) return s;
  return response.value();
}

}  // namespace mt::parallel
