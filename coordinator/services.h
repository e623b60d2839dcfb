// gRPC handlers of the coordinator. Each handler checks the bearer token, converts the
// request, calls the owning component and maps its absl::Status (common/rpc). Thread-safe:
// they hold no state of their own beyond pointers to thread-safe components.
#ifndef MT_COORDINATOR_SERVICES_H_
#define MT_COORDINATOR_SERVICES_H_

#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/rpc/auth.h"
#include "coordinator/workers/registry.h"
#include "mt/v1/client_service.grpc.pb.h"
#include "mt/v1/worker_service.grpc.pb.h"

namespace mt::coordinator {

class ClientServiceImpl final : public mt::v1::ClientService::Service {
 public:
  ClientServiceImpl(const rpc::Authenticator* auth, WorkerRegistry* registry, const Clock* clock,
                    absl::Time start_time)
      : auth_(auth), registry_(registry), clock_(clock), start_time_(start_time) {}

  grpc::Status ListWorkers(grpc::ServerContext* context, const mt::v1::ListWorkersRequest* request,
                           mt::v1::ListWorkersResponse* response) override;
  grpc::Status DrainWorker(grpc::ServerContext* context, const mt::v1::DrainWorkerRequest* request,
                           mt::v1::Worker* response) override;
  grpc::Status PlanJob(grpc::ServerContext* context, const mt::v1::PlanJobRequest* request,
                       mt::v1::PlanJobResponse* response) override;
  grpc::Status GetClusterInfo(grpc::ServerContext* context,
                              const mt::v1::GetClusterInfoRequest* request,
                              mt::v1::ClusterInfo* response) override;

 private:
  const rpc::Authenticator* auth_;
  WorkerRegistry* registry_;
  const Clock* clock_;
  absl::Time start_time_;
};

class WorkerServiceImpl final : public mt::v1::WorkerService::Service {
 public:
  WorkerServiceImpl(const rpc::Authenticator* auth, WorkerRegistry* registry,
                    absl::Duration heartbeat_interval)
      : auth_(auth), registry_(registry), heartbeat_interval_(heartbeat_interval) {}

  grpc::Status Register(grpc::ServerContext* context, const mt::v1::RegisterRequest* request,
                        mt::v1::RegisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const mt::v1::HeartbeatRequest* request,
                         mt::v1::HeartbeatResponse* response) override;
  grpc::Status Deregister(grpc::ServerContext* context, const mt::v1::DeregisterRequest* request,
                          mt::v1::DeregisterResponse* response) override;

 private:
  const rpc::Authenticator* auth_;
  WorkerRegistry* registry_;
  absl::Duration heartbeat_interval_;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_SERVICES_H_
