// The worker-facing gRPC service (mt-worker daemons and their ranks): registration,
// heartbeats, the assignment stream, rank reports and the rendezvous store. Each handler
// checks the bearer token (and, for a daemon's calls after Register, its worker session; for a
// rank's rendezvous call, its rank credential), calls the
// owning component and maps its absl::Status (common/rpc). Thread-safe: it holds no state of its
// own beyond pointers to thread-safe components, set before serving.
#ifndef MT_COORDINATOR_WORKER_SERVICE_H_
#define MT_COORDINATOR_WORKER_SERVICE_H_

#include "absl/time/time.h"
#include "common/rpc/auth.h"
#include "coordinator/checkpoints/catalog.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/rendezvous/rank_credentials.h"
#include "coordinator/workers/registry.h"
#include "mt/v1/worker_service.grpc.pb.h"

namespace mt::coordinator {

class WorkerServiceImpl final : public mt::v1::WorkerService::Service {
 public:
  WorkerServiceImpl(const rpc::Authenticator* auth, WorkerRegistry* registry, JobManager* jobs,
                    absl::Duration heartbeat_interval)
      : auth_(auth), registry_(registry), jobs_(jobs), heartbeat_interval_(heartbeat_interval) {}

  grpc::Status StreamAssignments(grpc::ServerContext* context,
                                 const mt::v1::StreamAssignmentsRequest* request,
                                 grpc::ServerWriter<mt::v1::WorkerCommand>* writer) override;
  grpc::Status ReportProgress(grpc::ServerContext* context,
                              grpc::ServerReader<mt::v1::RankReport>* reader,
                              mt::v1::ReportProgressResponse* response) override;
  grpc::Status ReportRankExit(grpc::ServerContext* context, const mt::v1::RankExitReport* request,
                              mt::v1::RankExitResponse* response) override;
  grpc::Status RendezvousSet(grpc::ServerContext* context,
                             const mt::v1::RendezvousSetRequest* request,
                             mt::v1::RendezvousSetResponse* response) override;
  grpc::Status RendezvousGet(grpc::ServerContext* context,
                             const mt::v1::RendezvousGetRequest* request,
                             mt::v1::RendezvousGetResponse* response) override;
  grpc::Status RendezvousAdd(grpc::ServerContext* context,
                             const mt::v1::RendezvousAddRequest* request,
                             mt::v1::RendezvousAddResponse* response) override;

  grpc::Status Register(grpc::ServerContext* context, const mt::v1::RegisterRequest* request,
                        mt::v1::RegisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const mt::v1::HeartbeatRequest* request,
                         mt::v1::HeartbeatResponse* response) override;
  grpc::Status Deregister(grpc::ServerContext* context, const mt::v1::DeregisterRequest* request,
                          mt::v1::DeregisterResponse* response) override;

  // Registers the saves ranks report (set once before serving; none = not registered).
  void set_catalog(CheckpointCatalog* catalog) { catalog_ = catalog; }
  // Checks the rank credential of every rendezvous call (set once before serving; without it
  // the rendezvous RPCs answer UNIMPLEMENTED).
  void set_rank_credentials(const RankCredentials* credentials) { rank_credentials_ = credentials; }

 private:
  // A SUCCEEDED eval job's result onto its checkpoint's catalog entry (outside the job
  // manager's lock: the catalog asks the job manager about jobs).
  void RecordEvaluation(const mt::v1::RankExitReport& report);
  // OK when the call carries the current session of `worker_id` (rpc::kWorkerSessionHeader);
  // NOT_FOUND for an unknown worker, PERMISSION_DENIED naming it otherwise.
  absl::Status CheckWorker(const grpc::ServerContext& context, const std::string& worker_id) const;
  // OK when the call carries the rank credential of `rank` of (job_id, attempt)
  // (rpc::kRankCredentialHeader): a worker reaches only the rendezvous of the ranks it holds.
  grpc::Status CheckRank(const grpc::ServerContext& context, const std::string& job_id, int attempt,
                         int rank) const;
  // Hands a report's checkpoint to the catalog; problems are logged, never fail the stream.
  void RegisterCheckpoint(const mt::v1::RankReport& report);

  CheckpointCatalog* catalog_ = nullptr;
  const RankCredentials* rank_credentials_ = nullptr;
  const rpc::Authenticator* auth_;
  WorkerRegistry* registry_;
  JobManager* jobs_;
  absl::Duration heartbeat_interval_;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_WORKER_SERVICE_H_
