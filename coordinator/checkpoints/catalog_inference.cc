// CheckpointCatalog: what eval and generation jobs load, and their results on the entries.
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "coordinator/checkpoints/catalog.h"
#include "google/protobuf/util/time_util.h"

namespace mt::coordinator {
namespace {

bool Loadable(mt::v1::CheckpointState state) {
  return state == mt::v1::CHECKPOINT_STATE_COMPLETE || state == mt::v1::CHECKPOINT_STATE_VERIFIED;
}

}  // namespace

absl::StatusOr<CheckpointCatalog::LoadTarget> CheckpointCatalog::ResolveForLoad(
    const std::string& checkpoint) {
  if (checkpoint.empty()) {
    return absl::InvalidArgumentError(
        "CHECKPOINT is required: a catalog id (`mtctl checkpoints list`) or an absolute "
        "checkpoint or save directory");
  }
  LoadTarget target;
  if (absl::StartsWith(checkpoint, "c-")) {
    MT_ASSIGN_OR_RETURN(mt::v1::Checkpoint c, store_->GetCheckpoint(checkpoint));
    if (!Loadable(c.state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", checkpoint, " is ", mt::v1::CheckpointState_Name(c.state()),
                       ": only COMPLETE or VERIFIED checkpoints load"));
    }
    target.checkpoint_id = c.id();
    target.directory = c.directory();
    MT_ASSIGN_OR_RETURN(target.manifest, checkpoint::ReadManifest(c.directory()));
    return target;
  }
  MT_RETURN_IF_ERROR(ValidateAbsolutePath(checkpoint, "CHECKPOINT"));
  MT_RETURN_IF_ERROR(roots_.Check(checkpoint, "CHECKPOINT"));
  absl::StatusOr<checkpoint::LoadChoice> choice =
      checkpoint::ChooseCheckpoint(checkpoint, /*verify=*/false);
  if (!choice.ok()) {
    return absl::NotFoundError(
        absl::StrCat("CHECKPOINT ", checkpoint, ": ", choice.status().message()));
  }
  target.directory = choice->dir;
  target.manifest = choice->manifest;
  MT_ASSIGN_OR_RETURN(std::optional<mt::v1::Checkpoint> entry,
                      store_->FindCheckpointByDirectory(choice->dir));
  if (entry.has_value()) target.checkpoint_id = entry->id();
  return target;
}

absl::Status CheckpointCatalog::RecordEvaluation(const mt::v1::Job& job) {
  const mt::v1::InferenceSpec& inference = job.spec().inference();
  if (!inference.has_eval()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  std::optional<mt::v1::Checkpoint> c;
  if (!inference.checkpoint_id().empty()) {
    absl::StatusOr<mt::v1::Checkpoint> got = store_->GetCheckpoint(inference.checkpoint_id());
    if (absl::IsNotFound(got.status())) return absl::OkStatus();
    MT_RETURN_IF_ERROR(got.status());
    c = *std::move(got);
  } else {
    MT_ASSIGN_OR_RETURN(c, store_->FindCheckpointByDirectory(inference.checkpoint_dir()));
    if (!c.has_value()) return absl::OkStatus();
  }
  for (const mt::v1::CheckpointEvaluation& e : c->evaluations()) {
    if (e.job_id() == job.id()) return absl::OkStatus();  // recorded already
  }
  mt::v1::CheckpointEvaluation* e = c->add_evaluations();
  e->set_job_id(job.id());
  *e->mutable_time() = job.has_end_time()
                           ? job.end_time()
                           : google::protobuf::util::TimeUtil::NanosecondsToTimestamp(
                                 absl::ToUnixNanos(clock_->Now()));
  e->set_data_path(inference.eval().data_path());
  e->set_split(inference.eval().split());
  if (inference.eval().quantize() != "none") e->set_quantize(inference.eval().quantize());
  e->set_loss(job.progress().validation_loss());
  e->set_perplexity(job.progress().validation_perplexity());
  e->set_tokens(job.progress().evaluated_tokens());
  auto* list = c->mutable_evaluations();
  if (list->size() > kMaxEvaluations) list->DeleteSubrange(0, list->size() - kMaxEvaluations);
  return store_->UpdateCheckpoint(*c);
}

}  // namespace mt::coordinator
