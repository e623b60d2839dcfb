#include "worker/parallel/rendezvous_client.h"

#include <cstdlib>
#include <utility>

#include "common/rpc/grpc_status.h"
#include "common/rpc/worker_credential.h"
#include "google/protobuf/util/time_util.h"

namespace mt::parallel {

using google::protobuf::util::TimeUtil;

RendezvousClient::RendezvousClient(std::shared_ptr<grpc::Channel> channel, std::string job_id,
                                   int attempt, int rank, std::string credential)
    : stub_(mt::v1::WorkerService::NewStub(std::move(channel))),
      job_id_(std::move(job_id)),
      attempt_(attempt),
      rank_(rank),
      credential_(std::move(credential)) {}

void RendezvousClient::Prepare(grpc::ClientContext* context, absl::Duration deadline) const {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(absl::ToInt64Milliseconds(deadline)));
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
  grpc::ClientContext context;
  Prepare(&context, absl::Seconds(30));
  return rpc::FromGrpcStatus(stub_->RendezvousSet(&context, request, &response));
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
  grpc::ClientContext context;
  Prepare(&context, timeout + absl::Seconds(10));
  absl::Status s = rpc::FromGrpcStatus(stub_->RendezvousGet(&context, request, &response));
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
  Prepare(&context, absl::Seconds(30));
  absl::Status s = rpc::FromGrpcStatus(stub_->RendezvousAdd(&context, request, &response));
  if (!s.ok()) return s;
  return response.value();
}

}  // namespace mt::parallel
