// The client-facing gRPC service (mtctl): jobs, workers, plans, cluster info and the
// checkpoint catalog. Each handler checks the bearer token, calls the owning component and maps
// its absl::Status (common/rpc). Thread-safe: it holds no state of its own beyond pointers to
// thread-safe components, set before serving.
#ifndef MT_COORDINATOR_CLIENT_SERVICE_H_
#define MT_COORDINATOR_CLIENT_SERVICE_H_

#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/confine.h"
#include "common/rpc/auth.h"
#include "coordinator/checkpoints/catalog.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/workers/registry.h"
#include "mt/v1/client_service.grpc.pb.h"

namespace mt::coordinator {

class CoordinatorMetrics;

class ClientServiceImpl final : public mt::v1::ClientService::Service {
 public:
  ClientServiceImpl(const rpc::Authenticator* auth, WorkerRegistry* registry, JobManager* jobs,
                    const Clock* clock, absl::Time start_time)
      : auth_(auth), registry_(registry), jobs_(jobs), clock_(clock), start_time_(start_time) {}

  grpc::Status SubmitJob(grpc::ServerContext* context, const mt::v1::SubmitJobRequest* request,
                         mt::v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const mt::v1::GetJobRequest* request,
                      mt::v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const mt::v1::ListJobsRequest* request,
                        mt::v1::ListJobsResponse* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const mt::v1::WatchJobRequest* request,
                        grpc::ServerWriter<mt::v1::JobUpdate>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const mt::v1::CancelJobRequest* request,
                         mt::v1::Job* response) override;
  grpc::Status DeleteJob(grpc::ServerContext* context, const mt::v1::DeleteJobRequest* request,
                         mt::v1::Job* response) override;
  grpc::Status GetJobLogs(grpc::ServerContext* context, const mt::v1::GetJobLogsRequest* request,
                          mt::v1::GetJobLogsResponse* response) override;

  grpc::Status ListWorkers(grpc::ServerContext* context, const mt::v1::ListWorkersRequest* request,
                           mt::v1::ListWorkersResponse* response) override;
  grpc::Status DrainWorker(grpc::ServerContext* context, const mt::v1::DrainWorkerRequest* request,
                           mt::v1::Worker* response) override;
  grpc::Status PlanJob(grpc::ServerContext* context, const mt::v1::PlanJobRequest* request,
                       mt::v1::PlanJobResponse* response) override;
  grpc::Status GetClusterInfo(grpc::ServerContext* context,
                              const mt::v1::GetClusterInfoRequest* request,
                              mt::v1::ClusterInfo* response) override;

  // The checkpoint RPCs, served by the catalog (set once before serving; without one they
  // answer UNIMPLEMENTED saying so).
  void set_catalog(CheckpointCatalog* catalog) { catalog_ = catalog; }
  grpc::Status ListCheckpoints(grpc::ServerContext* context,
                               const mt::v1::ListCheckpointsRequest* request,
                               mt::v1::ListCheckpointsResponse* response) override;
  grpc::Status GetCheckpoint(grpc::ServerContext* context,
                             const mt::v1::GetCheckpointRequest* request,
                             mt::v1::Checkpoint* response) override;
  grpc::Status DeleteCheckpoint(grpc::ServerContext* context,
                                const mt::v1::DeleteCheckpointRequest* request,
                                mt::v1::Checkpoint* response) override;
  grpc::Status VerifyCheckpoint(grpc::ServerContext* context,
                                const mt::v1::VerifyCheckpointRequest* request,
                                mt::v1::VerifyCheckpointResponse* response) override;
  grpc::Status DownloadCheckpoint(
      grpc::ServerContext* context, const mt::v1::DownloadCheckpointRequest* request,
      grpc::ServerWriter<mt::v1::DownloadCheckpointChunk>* writer) override;
  grpc::Status ExportCheckpoint(grpc::ServerContext* context,
                                const mt::v1::ExportCheckpointRequest* request,
                                mt::v1::ExportCheckpointResponse* response) override;
  grpc::Status ImportCheckpoint(grpc::ServerContext* context,
                                const mt::v1::ImportCheckpointRequest* request,
                                mt::v1::Checkpoint* response) override;

  // Evaluation and generation jobs from a checkpoint (client_inference.cc; they need the
  // catalog).
  grpc::Status EvaluateCheckpoint(grpc::ServerContext* context,
                                  const mt::v1::EvaluateCheckpointRequest* request,
                                  mt::v1::SubmitJobResponse* response) override;
  grpc::Status GenerateText(grpc::ServerContext* context,
                            const mt::v1::GenerateTextRequest* request,
                            grpc::ServerWriter<mt::v1::GenerateTextResponse>* writer) override;

  // Where GetClusterInfo finds the metrics URLs (optional; set before serving).
  void set_metrics(CoordinatorMetrics* metrics) { metrics_ = metrics; }
  // The roots every path of a submitted spec must resolve into (none = not confined; set
  // before serving).
  void set_allowed_roots(AllowedRoots roots) { allowed_roots_ = std::move(roots); }

 private:
  // OK when `caller` may act on `job_id` as `method` (coordinator/job_access.h); NOT_FOUND for
  // an unknown job.
  absl::Status CheckOwnJob(const rpc::Principal& caller, const std::string& job_id,
                           absl::string_view method);
  // OK when `caller` may act on checkpoint `checkpoint_id` as `method`: the rule of its job
  // (CheckCheckpointAccess); NOT_FOUND for an unknown checkpoint. Needs the catalog.
  absl::Status CheckOwnCheckpoint(const rpc::Principal& caller, const std::string& checkpoint_id,
                                  absl::string_view method);

  // The spec of an eval or generation job of `checkpoint` (client_inference.cc).
  absl::StatusOr<mt::v1::JobSpec> InferenceSpecFor(const std::string& checkpoint,
                                                   mt::v1::InferenceSpec inference,
                                                   const std::string& name, int32_t priority,
                                                   mt::v1::DeviceKind device);
  // Streams a generation job's text until every sample is done (client_inference.cc).
  grpc::Status StreamGenerated(grpc::ServerContext* context, const std::string& job_id,
                               int64_t samples, const std::string& caller,
                               grpc::ServerWriter<mt::v1::GenerateTextResponse>* writer);

  CheckpointCatalog* catalog_ = nullptr;
  const rpc::Authenticator* auth_;
  WorkerRegistry* registry_;
  JobManager* jobs_;
  const Clock* clock_;
  absl::Time start_time_;
  CoordinatorMetrics* metrics_ = nullptr;
  AllowedRoots allowed_roots_;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_CLIENT_SERVICE_H_
