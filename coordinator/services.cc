#include "coordinator/services.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/version.h"
#include "common/rpc/grpc_status.h"
#include "coordinator/plan.h"
#include "google/protobuf/util/time_util.h"

namespace mt::coordinator {
namespace {

using google::protobuf::util::TimeUtil;

#define MT_CHECK_AUTH(context)                                    \
  do {                                                            \
    if (grpc::Status auth_status = auth_->Check(*(context));      \
        !auth_status.ok()) {                                      \
      return auth_status;                                         \
    }                                                             \
  } while (false)

// page_size 0 -> 100; 1..1000 accepted. Tokens are opaque offsets into the ordered listing.
absl::Status ParsePage(int32_t page_size, const std::string& token, int* size, int* offset) {
  if (page_size < 0 || page_size > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size must be 0..1000 (0 = 100), got ", page_size));
  }
  *size = page_size == 0 ? 100 : page_size;
  *offset = 0;
  if (!token.empty() && (!absl::SimpleAtoi(token, offset) || *offset < 0)) {
    return absl::InvalidArgumentError("page_token is not one this server issued");
  }
  return absl::OkStatus();
}

}  // namespace

grpc::Status ClientServiceImpl::ListWorkers(grpc::ServerContext* context,
                                            const mt::v1::ListWorkersRequest* request,
                                            mt::v1::ListWorkersResponse* response) {
  MT_CHECK_AUTH(context);
  int size = 0, offset = 0;
  if (absl::Status s = ParsePage(request->page_size(), request->page_token(), &size, &offset);
      !s.ok()) {
    return rpc::ToGrpcStatus(s);
  }
  std::vector<mt::v1::WorkerState> states;
  for (int s : request->states()) states.push_back(static_cast<mt::v1::WorkerState>(s));
  std::vector<mt::v1::Worker> all = registry_->List(states, request->node());
  for (int i = offset; i < static_cast<int>(all.size()) && i < offset + size; ++i) {
    *response->add_workers() = all[i];
  }
  if (offset + size < static_cast<int>(all.size())) {
    response->set_next_page_token(std::to_string(offset + size));
  }
  response->set_total_count(static_cast<int64_t>(all.size()));
  return grpc::Status::OK;
}

grpc::Status ClientServiceImpl::DrainWorker(grpc::ServerContext* context,
                                            const mt::v1::DrainWorkerRequest* request,
                                            mt::v1::Worker* response) {
  MT_CHECK_AUTH(context);
  absl::StatusOr<mt::v1::Worker> w = registry_->Drain(request->worker_id());
  if (!w.ok()) return rpc::ToGrpcStatus(w.status());
  *response = *std::move(w);
  return grpc::Status::OK;
}

grpc::Status ClientServiceImpl::PlanJob(grpc::ServerContext* context,
                                        const mt::v1::PlanJobRequest* request,
                                        mt::v1::PlanJobResponse* response) {
  MT_CHECK_AUTH(context);
  std::vector<mt::v1::Worker> free_workers =
      registry_->List({mt::v1::WORKER_STATE_IDLE}, /*node=*/"");
  absl::StatusOr<mt::v1::PlanJobResponse> plan = PlanOnWorkers(request->spec(), free_workers);
  if (!plan.ok()) return rpc::ToGrpcStatus(plan.status());
  *response = *std::move(plan);
  return grpc::Status::OK;
}

grpc::Status ClientServiceImpl::GetClusterInfo(grpc::ServerContext* context,
                                               const mt::v1::GetClusterInfoRequest* request,
                                               mt::v1::ClusterInfo* response) {
  MT_CHECK_AUTH(context);
  WorkerCounts c = registry_->Counts();
  response->set_version(kVersion);
  *response->mutable_start_time() = TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(start_time_));
  response->set_workers_total(c.total);
  response->set_workers_idle(c.idle);
  response->set_workers_busy(c.busy);
  response->set_workers_lost(c.lost);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Register(grpc::ServerContext* context,
                                         const mt::v1::RegisterRequest* request,
                                         mt::v1::RegisterResponse* response) {
  MT_CHECK_AUTH(context);
  absl::StatusOr<mt::v1::Worker> w = registry_->Register(*request);
  if (!w.ok()) return rpc::ToGrpcStatus(w.status());
  response->set_worker_id(w->id());
  *response->mutable_heartbeat_interval() =
      TimeUtil::NanosecondsToDuration(absl::ToInt64Nanoseconds(heartbeat_interval_));
  *response->mutable_lost_after() =
      TimeUtil::NanosecondsToDuration(absl::ToInt64Nanoseconds(registry_->lost_after()));
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* context,
                                          const mt::v1::HeartbeatRequest* request,
                                          mt::v1::HeartbeatResponse* response) {
  MT_CHECK_AUTH(context);
  absl::Status s = registry_->Heartbeat(request->worker_id());
  if (absl::IsNotFound(s)) {
    response->set_known(false);
    return grpc::Status::OK;
  }
  if (!s.ok()) return rpc::ToGrpcStatus(s);
  response->set_known(true);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Deregister(grpc::ServerContext* context,
                                           const mt::v1::DeregisterRequest* request,
                                           mt::v1::DeregisterResponse* response) {
  MT_CHECK_AUTH(context);
  return rpc::ToGrpcStatus(registry_->Deregister(request->worker_id()));
}

}  // namespace mt::coordinator
