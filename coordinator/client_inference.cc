// ClientService: evaluation and generation jobs from a checkpoint (`mtctl eval`, `mtctl
// generate`; docs/inference.md). Both are jobs built from the checkpoint's manifest (one rank,
// or the task's parallel sizes: common/spec/inference.h) and submitted like any job, owned by
// the caller.
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc/grpc_status.h"
#include "common/spec/inference.h"
#include "common/spec/validate.h"
#include "coordinator/client_service.h"
#include "coordinator/jobs/job_state.h"
#include "coordinator/service_util.h"

namespace mt::coordinator {
namespace {

// How long a stream waits, after its job succeeded, for text still on its way from the worker
// (the rank's reports and its exit report travel on different calls).
constexpr absl::Duration kTrailingTextWait = absl::Seconds(5);

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::Status CheckDataPrefix(const std::string& prefix) {
  for (const char* ext : {".bin", ".idx"}) {
    if (!IsFile(prefix + ext)) {
      return absl::InvalidArgumentError(absl::StrCat("--data-path ", prefix, ": ", prefix, ext,
                                                     " does not exist (give the dataset prefix, "
                                                     "without .bin/.idx)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<mt::v1::JobSpec> ClientServiceImpl::InferenceSpecFor(const std::string& checkpoint,
                                                                    mt::v1::InferenceSpec inference,
                                                                    const std::string& name,
                                                                    int32_t priority,
                                                                    mt::v1::DeviceKind device) {
  if (catalog_ == nullptr) {
    return absl::UnimplementedError("this coordinator was started without a checkpoint catalog");
  }
  // The task's own flags first: they are wrong whatever the checkpoint.
  if (inference.has_eval()) {
    if (absl::Status s = spec::ValidateEvalTask(inference.eval(), int64_t{1} << 30); !s.ok()) {
      return s;
    }
  } else if (absl::Status s = spec::ValidateGenerateTask(inference.generate()); !s.ok()) {
    return s;
  }
  absl::StatusOr<CheckpointCatalog::LoadTarget> target = catalog_->ResolveForLoad(checkpoint);
  if (!target.ok()) return target.status();
  if (inference.has_eval()) {
    if (absl::Status s = CheckDataPrefix(inference.eval().data_path()); !s.ok()) return s;
  }
  inference.set_checkpoint_id(target->checkpoint_id);
  absl::StatusOr<mt::v1::JobSpec> spec = spec::InferenceJobSpec(
      target->manifest, target->directory, std::move(inference), name, priority, device);
  if (!spec.ok()) return spec.status();
  if (absl::Status s = spec::CheckPathsConfined(*spec, allowed_roots_); !s.ok()) return s;
  return spec;
}

grpc::Status ClientServiceImpl::EvaluateCheckpoint(grpc::ServerContext* context,
                                                   const mt::v1::EvaluateCheckpointRequest* request,
                                                   mt::v1::SubmitJobResponse* response) {
  rpc::Principal caller;
  MT_CHECK_AUTH_AS(context, caller);
  mt::v1::InferenceSpec inference;
  *inference.mutable_eval() = request->eval();
  absl::StatusOr<mt::v1::JobSpec> spec = InferenceSpecFor(
      request->checkpoint(), std::move(inference),
      request->name().empty() ? "eval" : request->name(), request->priority(), request->device());
  if (!spec.ok()) return rpc::ToGrpcStatus(spec.status());
  return Reply(jobs_->Submit(*spec, request->request_id(), caller.name), response);
}

grpc::Status ClientServiceImpl::GenerateText(
    grpc::ServerContext* context, const mt::v1::GenerateTextRequest* request,
    grpc::ServerWriter<mt::v1::GenerateTextResponse>* writer) {
  rpc::Principal caller;
  MT_CHECK_AUTH_AS(context, caller);
  mt::v1::InferenceSpec inference;
  *inference.mutable_generate() = request->generate();
  absl::StatusOr<mt::v1::JobSpec> spec =
      InferenceSpecFor(request->checkpoint(), std::move(inference),
                       request->name().empty() ? "generate" : request->name(), request->priority(),
                       request->device());
  if (!spec.ok()) return rpc::ToGrpcStatus(spec.status());
  absl::StatusOr<mt::v1::SubmitJobResponse> submitted = jobs_->Submit(*spec, "", caller.name);
  if (!submitted.ok()) return rpc::ToGrpcStatus(submitted.status());
  const std::string job_id = submitted->job().id();
  const int64_t samples =
      request->generate().has_num_samples() ? request->generate().num_samples() : 1;
  grpc::Status status = StreamGenerated(context, job_id, samples, caller.name, writer);
  jobs_->ReleaseGenerated(job_id);
  return status;
}

grpc::Status ClientServiceImpl::StreamGenerated(
    grpc::ServerContext* context, const std::string& job_id, int64_t samples,
    const std::string& caller, grpc::ServerWriter<mt::v1::GenerateTextResponse>* writer) {
  mt::v1::GenerateTextResponse first;
  first.set_job_id(job_id);
  bool client_here = writer->Write(first);
  size_t cursor = 0;
  int64_t done = 0;
  absl::Time succeeded_at = absl::InfiniteFuture();
  while (client_here && !context->IsCancelled()) {
    absl::StatusOr<JobManager::GeneratedSince> got =
        jobs_->WaitForGenerated(job_id, cursor, absl::Milliseconds(250));
    if (!got.ok()) return rpc::ToGrpcStatus(got.status());
    for (mt::v1::GeneratedText& text : got->texts) {
      ++cursor;
      if (text.done()) ++done;
      mt::v1::GenerateTextResponse message;
      *message.mutable_text() = std::move(text);
      if (!writer->Write(message)) {
        client_here = false;
        break;
      }
    }
    if (!client_here) break;
    if (done >= samples) return grpc::Status::OK;
    if (got->state == mt::v1::JOB_STATE_SUCCEEDED) {
      if (succeeded_at == absl::InfiniteFuture()) succeeded_at = absl::Now();
      if (absl::Now() - succeeded_at > kTrailingTextWait) {
        return grpc::Status(grpc::StatusCode::DATA_LOSS,
                            absl::StrCat("job ", job_id, " succeeded but ", samples - done,
                                         " sample(s) did not reach the coordinator whole"));
      }
    } else if (IsTerminal(got->state)) {
      return grpc::Status(
          grpc::StatusCode::ABORTED,
          absl::StrCat("job ", job_id, " ", ShortName(got->state), ": ", got->reason));
    }
  }
  // The client went away: its job has no one to answer.
  (void)jobs_->Cancel(job_id, "the client of its generate stream went away", caller);
  return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
}

}  // namespace mt::coordinator
