#include "coordinator/client_service.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/version.h"
#include "common/rpc/grpc_status.h"
#include "common/spec/validate.h"
#include "coordinator/job_access.h"
#include "coordinator/metrics/coordinator_metrics.h"
#include "coordinator/plan.h"
#include "coordinator/service_util.h"
#include "google/protobuf/util/time_util.h"

namespace mt::coordinator {

using google::protobuf::util::TimeUtil;

namespace {

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

grpc::Status NoCatalog() {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "this coordinator was started without a checkpoint catalog");
}

}  // namespace

absl::Status ClientServiceImpl::CheckOwnJob(const rpc::Principal& caller, const std::string& job_id,
                                            absl::string_view method) {
  if (caller.role == rpc::Role::kAdmin) return absl::OkStatus();
  // The owner never changes once the job exists, so checking before acting is not racy.
  absl::StatusOr<mt::v1::Job> job = jobs_->Get(job_id, /*include_events=*/false);
  if (!job.ok()) return job.status();
  return CheckJobAccess(caller, *job, method);
}

absl::Status ClientServiceImpl::CheckOwnCheckpoint(const rpc::Principal& caller,
                                                   const std::string& checkpoint_id,
                                                   absl::string_view method) {
  if (caller.role == rpc::Role::kAdmin) return absl::OkStatus();
  // A checkpoint's job, and that job's owner, never change once they exist.
  absl::StatusOr<mt::v1::Checkpoint> checkpoint = catalog_->Get(checkpoint_id);
  if (!checkpoint.ok()) return checkpoint.status();
  if (checkpoint->job_id().empty()) {
    return CheckCheckpointAccess(caller, *checkpoint, nullptr, method);
  }
  absl::StatusOr<mt::v1::Job> job = jobs_->Get(checkpoint->job_id(), /*include_events=*/false);
  if (!job.ok() && job.status().code() != absl::StatusCode::kNotFound) return job.status();
  return CheckCheckpointAccess(caller, *checkpoint, job.ok() ? &*job : nullptr, method);
}

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
  return Reply(registry_->Drain(request->worker_id()), response);
}

grpc::Status ClientServiceImpl::PlanJob(grpc::ServerContext* context,
                                        const mt::v1::PlanJobRequest* request,
                                        mt::v1::PlanJobResponse* response) {
  MT_CHECK_AUTH(context);
  std::vector<mt::v1::Worker> free_workers =
      registry_->List({mt::v1::WORKER_STATE_IDLE}, /*node=*/"");
  return Reply(PlanOnWorkers(request->spec(), free_workers), response);
}

grpc::Status ClientServiceImpl::GetClusterInfo(grpc::ServerContext* context,
                                               const mt::v1::GetClusterInfoRequest* request,
                                               mt::v1::ClusterInfo* response) {
  MT_CHECK_AUTH(context);
  WorkerCounts c = registry_->Counts();
  response->set_version(kVersion);
  *response->mutable_start_time() =
      TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(start_time_));
  response->set_workers_total(c.total);
  response->set_workers_idle(c.idle);
  response->set_workers_busy(c.busy);
  response->set_workers_lost(c.lost);
  auto counts = jobs_->CountByState();
  response->set_jobs_pending(counts[mt::v1::JOB_STATE_PENDING]);
  response->set_jobs_running(counts[mt::v1::JOB_STATE_RUNNING] +
                             counts[mt::v1::JOB_STATE_SCHEDULED]);
  if (metrics_ != nullptr) {
    response->set_metrics_url(metrics_->metrics_url());
    response->set_metrics_sd_url(metrics_->sd_url());
  }
  return grpc::Status::OK;
}

grpc::Status ClientServiceImpl::SubmitJob(grpc::ServerContext* context,
                                          const mt::v1::SubmitJobRequest* request,
                                          mt::v1::SubmitJobResponse* response) {
  rpc::Principal caller;
  MT_CHECK_AUTH_AS(context, caller);
  if (absl::Status s = spec::CheckPathsConfined(request->spec(), allowed_roots_); !s.ok()) {
    return rpc::ToGrpcStatus(s);
  }
  return Reply(jobs_->Submit(request->spec(), request->request_id(), caller.name), response);
}

grpc::Status ClientServiceImpl::GetJob(grpc::ServerContext* context,
                                       const mt::v1::GetJobRequest* request,
                                       mt::v1::Job* response) {
  MT_CHECK_AUTH(context);
  return Reply(jobs_->Get(request->job_id(), request->include_events()), response);
}

grpc::Status ClientServiceImpl::ListJobs(grpc::ServerContext* context,
                                         const mt::v1::ListJobsRequest* request,
                                         mt::v1::ListJobsResponse* response) {
  MT_CHECK_AUTH(context);
  return Reply(jobs_->List(*request), response);
}

grpc::Status ClientServiceImpl::WatchJob(grpc::ServerContext* context,
                                         const mt::v1::WatchJobRequest* request,
                                         grpc::ServerWriter<mt::v1::JobUpdate>* writer) {
  MT_CHECK_AUTH(context);
  uint64_t seen = 0;
  bool first = true;
  while (!context->IsCancelled()) {
    auto snap = jobs_->WaitForChange(request->job_id(), seen, absl::Milliseconds(500));
    if (!snap.ok()) return rpc::ToGrpcStatus(snap.status());
    if (snap->version == seen) continue;  // timed out; look at the cancellation again
    mt::v1::JobUpdate update;
    *update.mutable_job() = std::move(snap->job);
    if (!first) update.mutable_job()->clear_spec();
    if (snap->last_event.has_value()) *update.mutable_event() = *snap->last_event;
    if (!writer->Write(update)) return grpc::Status::OK;  // the client went away
    first = false;
    seen = snap->version;
    const auto state = update.job().state();
    if (state == mt::v1::JOB_STATE_SUCCEEDED || state == mt::v1::JOB_STATE_FAILED ||
        state == mt::v1::JOB_STATE_CANCELLED) {
      return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
}

grpc::Status ClientServiceImpl::CancelJob(grpc::ServerContext* context,
                                          const mt::v1::CancelJobRequest* request,
                                          mt::v1::Job* response) {
  rpc::Principal caller;
  MT_CHECK_AUTH_AS(context, caller);
  if (absl::Status s = CheckOwnJob(caller, request->job_id(), "CancelJob"); !s.ok()) {
    return rpc::ToGrpcStatus(s);
  }
  return Reply(jobs_->Cancel(request->job_id(), request->reason(), caller.name, request->no_save()),
               response);
}

grpc::Status ClientServiceImpl::DeleteJob(grpc::ServerContext* context,
                                          const mt::v1::DeleteJobRequest* request,
                                          mt::v1::Job* response) {
  rpc::Principal caller;
  MT_CHECK_AUTH_AS(context, caller);
  if (absl::Status s = CheckOwnJob(caller, request->job_id(), "DeleteJob"); !s.ok()) {
    return rpc::ToGrpcStatus(s);
  }
  return Reply(jobs_->Delete(request->job_id()), response);
}

grpc::Status ClientServiceImpl::GetJobLogs(grpc::ServerContext* context,
                                           const mt::v1::GetJobLogsRequest* request,
                                           mt::v1::GetJobLogsResponse* response) {
  MT_CHECK_AUTH(context);
  return Reply(jobs_->Logs(*request), response);
}

grpc::Status ClientServiceImpl::ListCheckpoints(grpc::ServerContext* context,
                                                const mt::v1::ListCheckpointsRequest* request,
                                                mt::v1::ListCheckpointsResponse* response) {
  MT_CHECK_AUTH(context);
  if (catalog_ == nullptr) return NoCatalog();
  return Reply(catalog_->List(*request), response);
}

grpc::Status ClientServiceImpl::GetCheckpoint(grpc::ServerContext* context,
                                              const mt::v1::GetCheckpointRequest* request,
                                              mt::v1::Checkpoint* response) {
  MT_CHECK_AUTH(context);
  if (catalog_ == nullptr) return NoCatalog();
  return Reply(catalog_->Get(request->checkpoint_id()), response);
}

grpc::Status ClientServiceImpl::DeleteCheckpoint(grpc::ServerContext* context,
                                                 const mt::v1::DeleteCheckpointRequest* request,
                                                 mt::v1::Checkpoint* response) {
  rpc::Principal caller;
  MT_CHECK_AUTH_AS(context, caller);
  if (catalog_ == nullptr) return NoCatalog();
  if (absl::Status s = CheckOwnCheckpoint(caller, request->checkpoint_id(), "DeleteCheckpoint");
      !s.ok()) {
    return rpc::ToGrpcStatus(s);
  }
  return Reply(catalog_->Delete(request->checkpoint_id()), response);
}

grpc::Status ClientServiceImpl::VerifyCheckpoint(grpc::ServerContext* context,
                                                 const mt::v1::VerifyCheckpointRequest* request,
                                                 mt::v1::VerifyCheckpointResponse* response) {
  MT_CHECK_AUTH(context);
  if (catalog_ == nullptr) return NoCatalog();
  return Reply(catalog_->Verify(request->checkpoint_id()), response);
}

grpc::Status ClientServiceImpl::DownloadCheckpoint(
    grpc::ServerContext* context, const mt::v1::DownloadCheckpointRequest* request,
    grpc::ServerWriter<mt::v1::DownloadCheckpointChunk>* writer) {
  MT_CHECK_AUTH(context);
  if (catalog_ == nullptr) return NoCatalog();
  return rpc::ToGrpcStatus(
      catalog_->Download(*request, [&](const mt::v1::DownloadCheckpointChunk& chunk) {
        return !context->IsCancelled() && writer->Write(chunk);
      }));
}

grpc::Status ClientServiceImpl::ExportCheckpoint(grpc::ServerContext* context,
                                                 const mt::v1::ExportCheckpointRequest* request,
                                                 mt::v1::ExportCheckpointResponse* response) {
  rpc::Principal caller;
  MT_CHECK_AUTH_AS(context, caller);
  if (catalog_ == nullptr) return NoCatalog();
  if (absl::Status s = CheckOwnCheckpoint(caller, request->checkpoint_id(), "ExportCheckpoint");
      !s.ok()) {
    return rpc::ToGrpcStatus(s);
  }
  return Reply(catalog_->Export(*request), response);
}

grpc::Status ClientServiceImpl::ImportCheckpoint(grpc::ServerContext* context,
                                                 const mt::v1::ImportCheckpointRequest* request,
                                                 mt::v1::Checkpoint* response) {
  MT_CHECK_AUTH(context);
  if (catalog_ == nullptr) return NoCatalog();
  return Reply(catalog_->Import(*request), response);
}

}  // namespace mt::coordinator
