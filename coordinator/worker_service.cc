#include "coordinator/worker_service.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/worker_credential.h"
#include "coordinator/service_util.h"
#include "coordinator/store/store.h"
#include "google/protobuf/util/time_util.h"

namespace mt::coordinator {

using google::protobuf::util::TimeUtil;

grpc::Status WorkerServiceImpl::Register(grpc::ServerContext* context,
                                         const mt::v1::RegisterRequest* request,
                                         mt::v1::RegisterResponse* response) {
  MT_CHECK_AUTH(context);
  WorkerRegistry::Issued issued;
  absl::StatusOr<mt::v1::Worker> w = jobs_->RegisterWorker(*request, &issued);
  if (!w.ok()) return rpc::ToGrpcStatus(w.status());
  response->set_worker_id(w->id());
  response->set_worker_credential(issued.credential);
  response->set_session(issued.session);
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
  absl::Status s = CheckWorker(*context, request->worker_id());
  if (s.ok()) s = registry_->Heartbeat(request->worker_id());
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
  if (absl::Status s = CheckWorker(*context, request->worker_id()); !s.ok()) {
    return rpc::ToGrpcStatus(s);
  }
  return rpc::ToGrpcStatus(registry_->Deregister(request->worker_id()));
}

grpc::Status WorkerServiceImpl::StreamAssignments(
    grpc::ServerContext* context, const mt::v1::StreamAssignmentsRequest* request,
    grpc::ServerWriter<mt::v1::WorkerCommand>* writer) {
  MT_CHECK_AUTH(context);
  if (absl::Status s = CheckWorker(*context, request->worker_id()); !s.ok()) {
    return rpc::ToGrpcStatus(s);
  }
  while (!context->IsCancelled()) {
    for (const auto& cmd : jobs_->TakeCommands(request->worker_id(), absl::Milliseconds(500))) {
      if (!writer->Write(cmd)) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "assignment stream closed");
      }
    }
    auto w = registry_->Get(request->worker_id());
    // A newer registration of the worker (another session) ends this stream.
    if (!w.ok() || !CheckWorker(*context, request->worker_id()).ok() ||
        w->state() == mt::v1::WORKER_STATE_LOST || w->state() == mt::v1::WORKER_STATE_GONE) {
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
    // A report from a session that is not the worker's current one ends the stream: the
    // daemon reopens it after registering again.
    if (absl::Status s = CheckWorker(*context, report.worker_id()); !s.ok()) {
      return rpc::ToGrpcStatus(s);
    }
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
  if (absl::Status s = CheckWorker(*context, request->worker_id()); !s.ok()) {
    return rpc::ToGrpcStatus(s);
  }
  const absl::Status s = jobs_->OnRankExit(*request);
  if (s.ok() && request->outcome() == mt::v1::RANK_OUTCOME_SUCCEEDED) RecordEvaluation(*request);
  return rpc::ToGrpcStatus(s);
}

void WorkerServiceImpl::RecordEvaluation(const mt::v1::RankExitReport& report) {
  if (catalog_ == nullptr) return;
  absl::StatusOr<mt::v1::Job> job = jobs_->Get(report.job_id(), /*include_events=*/false);
  if (!job.ok() || !job->spec().inference().has_eval() ||
      job->state() != mt::v1::JOB_STATE_SUCCEEDED) {
    return;
  }
  if (absl::Status s = catalog_->RecordEvaluation(*job); !s.ok()) {
    MT_LOG(WARNING) << "the result of " << job->id() << " is not in the catalog: " << s.message();
  }
}

grpc::Status WorkerServiceImpl::RendezvousSet(grpc::ServerContext* context,
                                              const mt::v1::RendezvousSetRequest* request,
                                              mt::v1::RendezvousSetResponse* response) {
  MT_CHECK_AUTH(context);
  if (grpc::Status s = CheckRank(*context, request->job_id(), request->attempt(), request->rank());
      !s.ok()) {
    return s;
  }
  return rpc::ToGrpcStatus(jobs_->RendezvousSet(request->job_id(), request->attempt(),
                                                request->key(), request->value()));
}

grpc::Status WorkerServiceImpl::RendezvousGet(grpc::ServerContext* context,
                                              const mt::v1::RendezvousGetRequest* request,
                                              mt::v1::RendezvousGetResponse* response) {
  MT_CHECK_AUTH(context);
  if (grpc::Status s = CheckRank(*context, request->job_id(), request->attempt(), request->rank());
      !s.ok()) {
    return s;
  }
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
  if (grpc::Status s = CheckRank(*context, request->job_id(), request->attempt(), request->rank());
      !s.ok()) {
    return s;
  }
  auto v =
      jobs_->RendezvousAdd(request->job_id(), request->attempt(), request->key(), request->delta());
  if (!v.ok()) return rpc::ToGrpcStatus(v.status());
  response->set_value(*v);
  return grpc::Status::OK;
}

absl::Status WorkerServiceImpl::CheckWorker(const grpc::ServerContext& context,
                                            const std::string& worker_id) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(rpc::kWorkerSessionHeader);
  const std::string session =
      it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
  return registry_->Authenticate(worker_id, session);
}

grpc::Status WorkerServiceImpl::CheckRank(const grpc::ServerContext& context,
                                          const std::string& job_id, int attempt, int rank) const {
  if (rank_credentials_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "this coordinator was started without rank credentials");
  }
  // A malformed request is answered as such, whoever sends it.
  if (absl::StatusOr<int64_t> id = ParseJobId(job_id); !id.ok()) {
    return rpc::ToGrpcStatus(id.status());
  }
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(rpc::kRankCredentialHeader);
  const absl::string_view presented = it == metadata.end()
                                          ? absl::string_view()
                                          : absl::string_view(it->second.data(), it->second.size());
  return rpc::ToGrpcStatus(rank_credentials_->Check(job_id, attempt, rank, presented));
}

void WorkerServiceImpl::RegisterCheckpoint(const mt::v1::RankReport& report) {
  if (catalog_ == nullptr) return;
  absl::StatusOr<mt::v1::Checkpoint> c = catalog_->OnCheckpointReport(report);
  if (!c.ok()) {
    MT_LOG(WARNING) << "checkpoint report of " << report.job_id() << " rank " << report.rank()
                    << " (" << report.checkpoint().directory()
                    << ") not registered: " << c.status().message();
  }
}

}  // namespace mt::coordinator
