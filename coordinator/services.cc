#include "coordinator/services.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/version.h"
#include "common/rpc/grpc_status.h"
#include "coordinator/metrics/coordinator_metrics.h"
#include "coordinator/plan.h"
#include "google/protobuf/util/time_util.h"

namespace mt::coordinator {
using google::protobuf::util::TimeUtil;
namespace {

#define MT_CHECK_AUTH(context)                                                    \
  do {                                                                            \
    if (grpc::Status auth_status = auth_->Check(*(context)); !auth_status.ok()) { \
      return auth_status;                                                         \
    }                                                                             \
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

grpc::Status WorkerServiceImpl::Register(grpc::ServerContext* context,
                                         const mt::v1::RegisterRequest* request,
                                         mt::v1::RegisterResponse* response) {
  MT_CHECK_AUTH(context);
  absl::StatusOr<mt::v1::Worker> w = registry_->Register(*request);
  if (!w.ok()) return rpc::ToGrpcStatus(w.status());
  jobs_->OnWorkerRegistered(*w, {request->running().begin(), request->running().end()});
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

namespace mt::coordinator {

// --- Jobs ------------------------------------------------------------------------------------

grpc::Status ClientServiceImpl::SubmitJob(grpc::ServerContext* context,
                                          const mt::v1::SubmitJobRequest* request,
                                          mt::v1::SubmitJobResponse* response) {
  MT_CHECK_AUTH(context);
  auto r = jobs_->Submit(request->spec(), request->request_id());
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status ClientServiceImpl::GetJob(grpc::ServerContext* context,
                                       const mt::v1::GetJobRequest* request,
                                       mt::v1::Job* response) {
  MT_CHECK_AUTH(context);
  auto r = jobs_->Get(request->job_id(), request->include_events());
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status ClientServiceImpl::ListJobs(grpc::ServerContext* context,
                                         const mt::v1::ListJobsRequest* request,
                                         mt::v1::ListJobsResponse* response) {
  MT_CHECK_AUTH(context);
  auto r = jobs_->List(*request);
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
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
  MT_CHECK_AUTH(context);
  auto r = jobs_->Cancel(request->job_id(), request->reason());
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status ClientServiceImpl::GetJobLogs(grpc::ServerContext* context,
                                           const mt::v1::GetJobLogsRequest* request,
                                           mt::v1::GetJobLogsResponse* response) {
  MT_CHECK_AUTH(context);
  auto r = jobs_->Logs(*request);
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
}

// --- Worker streams and reports ---------------------------------------------------------------

grpc::Status WorkerServiceImpl::StreamAssignments(
    grpc::ServerContext* context, const mt::v1::StreamAssignmentsRequest* request,
    grpc::ServerWriter<mt::v1::WorkerCommand>* writer) {
  MT_CHECK_AUTH(context);
  if (auto w = registry_->Get(request->worker_id()); !w.ok()) {
    return rpc::ToGrpcStatus(w.status());
  }
  while (!context->IsCancelled()) {
    for (const auto& cmd : jobs_->TakeCommands(request->worker_id(), absl::Milliseconds(500))) {
      if (!writer->Write(cmd)) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "assignment stream closed");
      }
    }
    auto w = registry_->Get(request->worker_id());
    if (!w.ok() || w->state() == mt::v1::WORKER_STATE_LOST ||
        w->state() == mt::v1::WORKER_STATE_GONE) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "worker is no longer registered");
    }
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "assignment stream cancelled");
}

grpc::Status WorkerServiceImpl::ReportProgress(grpc::ServerContext* context,
                                               grpc::ServerReader<mt::v1::RankReport>* reader,
                                               mt::v1::ReportProgressResponse* response) {
  MT_CHECK_AUTH(context);
  mt::v1::RankReport report;
  while (reader->Read(&report)) {
    absl::Status s = jobs_->OnRankReport(report);
    if (!s.ok() && !absl::IsNotFound(s)) {
      MT_LOG(WARNING) << "report from " << report.worker_id() << " ignored: " << s.message();
    }
    if (s.ok() && report.has_checkpoint()) RegisterCheckpoint(report);
  }
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::ReportRankExit(grpc::ServerContext* context,
                                               const mt::v1::RankExitReport* request,
                                               mt::v1::RankExitResponse* response) {
  MT_CHECK_AUTH(context);
  return rpc::ToGrpcStatus(jobs_->OnRankExit(*request));
}

grpc::Status WorkerServiceImpl::RendezvousSet(grpc::ServerContext* context,
                                              const mt::v1::RendezvousSetRequest* request,
                                              mt::v1::RendezvousSetResponse* response) {
  MT_CHECK_AUTH(context);
  return rpc::ToGrpcStatus(jobs_->RendezvousSet(request->job_id(), request->attempt(),
                                                request->key(), request->value()));
}

grpc::Status WorkerServiceImpl::RendezvousGet(grpc::ServerContext* context,
                                              const mt::v1::RendezvousGetRequest* request,
                                              mt::v1::RendezvousGetResponse* response) {
  MT_CHECK_AUTH(context);
  absl::Duration timeout = absl::Nanoseconds(TimeUtil::DurationToNanoseconds(request->timeout()));
  if (timeout <= absl::ZeroDuration()) timeout = absl::Seconds(300);
  if (timeout > absl::Hours(1)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "timeout must be at most 3600 s");
  }
  std::vector<std::string> keys(request->keys().begin(), request->keys().end());
  auto values = jobs_->RendezvousGet(request->job_id(), request->attempt(), keys, timeout);
  if (!values.ok()) return rpc::ToGrpcStatus(values.status());
  for (auto& v : *values) response->add_values(std::move(v));
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::RendezvousAdd(grpc::ServerContext* context,
                                              const mt::v1::RendezvousAddRequest* request,
                                              mt::v1::RendezvousAddResponse* response) {
  MT_CHECK_AUTH(context);
  auto v =
      jobs_->RendezvousAdd(request->job_id(), request->attempt(), request->key(), request->delta());
  if (!v.ok()) return rpc::ToGrpcStatus(v.status());
  response->set_value(*v);
  return grpc::Status::OK;
}

}  // namespace mt::coordinator

namespace mt::coordinator {
namespace {

grpc::Status NoCatalog() {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "this coordinator was started without a checkpoint catalog");
}

}  // namespace

void WorkerServiceImpl::RegisterCheckpoint(const mt::v1::RankReport& report) {
  if (catalog_ == nullptr) return;
  absl::StatusOr<mt::v1::Checkpoint> c = catalog_->OnCheckpointReport(report);
  if (!c.ok()) {
    MT_LOG(WARNING) << "checkpoint report of " << report.job_id() << " rank " << report.rank()
                    << " (" << report.checkpoint().directory()
                    << ") not registered: " << c.status().message();
  }
}

grpc::Status ClientServiceImpl::ListCheckpoints(grpc::ServerContext* context,
                                                const mt::v1::ListCheckpointsRequest* request,
                                                mt::v1::ListCheckpointsResponse* response) {
  MT_CHECK_AUTH(context);
  if (catalog_ == nullptr) return NoCatalog();
  auto r = catalog_->List(*request);
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status ClientServiceImpl::GetCheckpoint(grpc::ServerContext* context,
                                              const mt::v1::GetCheckpointRequest* request,
                                              mt::v1::Checkpoint* response) {
  MT_CHECK_AUTH(context);
  if (catalog_ == nullptr) return NoCatalog();
  auto r = catalog_->Get(request->checkpoint_id());
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status ClientServiceImpl::DeleteCheckpoint(grpc::ServerContext* context,
                                                 const mt::v1::DeleteCheckpointRequest* request,
                                                 mt::v1::Checkpoint* response) {
  MT_CHECK_AUTH(context);
  if (catalog_ == nullptr) return NoCatalog();
  auto r = catalog_->Delete(request->checkpoint_id());
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status ClientServiceImpl::VerifyCheckpoint(grpc::ServerContext* context,
                                                 const mt::v1::VerifyCheckpointRequest* request,
                                                 mt::v1::VerifyCheckpointResponse* response) {
  MT_CHECK_AUTH(context);
  if (catalog_ == nullptr) return NoCatalog();
  auto r = catalog_->Verify(request->checkpoint_id());
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
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
  MT_CHECK_AUTH(context);
  if (catalog_ == nullptr) return NoCatalog();
  auto r = catalog_->Export(*request);
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status ClientServiceImpl::ImportCheckpoint(grpc::ServerContext* context,
                                                 const mt::v1::ImportCheckpointRequest* request,
                                                 mt::v1::Checkpoint* response) {
  MT_CHECK_AUTH(context);
  if (catalog_ == nullptr) return NoCatalog();
  auto r = catalog_->Import(*request);
  if (!r.ok()) return rpc::ToGrpcStatus(r.status());
  *response = *std::move(r);
  return grpc::Status::OK;
}

}  // namespace mt::coordinator
