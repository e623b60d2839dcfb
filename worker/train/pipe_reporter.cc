#include "worker/train/pipe_reporter.h"

#include <algorithm>
#include <cmath>

#include "absl/time/clock.h"
#include "common/base/logging.h"
#include "google/protobuf/util/time_util.h"

namespace mt::train {

using google::protobuf::util::TimeUtil;

PipeReporter::PipeReporter(worker::ReportWriter writer, const mt::v1::JobSpec& spec,
                           const mt::v1::Assignment& assignment)
    : writer_(writer), spec_(spec), assignment_(assignment) {
  progress_.set_validation_loss(std::nan(""));
  progress_.set_validation_perplexity(std::nan(""));
  progress_.set_eta_seconds(-1);
}

void PipeReporter::Phase(mt::v1::RankPhase phase) {
  mt::v1::RankReport r;
  r.set_phase(phase);
  *r.mutable_progress() = progress_;
  Send(r);
}

void PipeReporter::OnSkippedCheckpoint(const std::string& problem) {
  MT_LOG(WARNING) << "skipped checkpoint " << problem;
}

void PipeReporter::OnLoadChosen(const std::string& directory, int64_t step) {
  MT_LOG(INFO) << "loading " << directory << " (step " << step << ")";
}

void PipeReporter::OnNoCheckpoint(const std::string& path) {
  MT_LOG(WARNING) << "no checkpoint in " << path << "; training from scratch";
}

void PipeReporter::OnCheckpointLoaded(const LoadedCheckpoint& loaded) {
  mt::v1::RankReport r;
  r.set_phase(mt::v1::RANK_PHASE_STARTING);
  mt::v1::CheckpointReport* c = r.mutable_checkpoint_load();
  c->set_step(loaded.step);
  c->set_directory(loaded.directory);
  c->set_size_bytes(loaded.bytes_read);
  c->set_seconds(loaded.seconds);
  Send(r);
}

absl::Status PipeReporter::OnTrainingStarted(engine::Trainer& trainer) {
  Phase(mt::v1::RANK_PHASE_TRAINING);
  // Metrics for the daemon's Prometheus endpoint and TensorBoard files (docs/metrics.md).
  auto observability =
      worker::metrics::RankObservability::Create(spec_, assignment_, trainer.plan(), writer_);
  if (!observability.ok()) return observability.status();
  observability_ = *std::move(observability);
  log_interval_ = std::max<int64_t>(1, trainer.plan().log_interval);
  first_step_ = trainer.iteration() + 1;
  return absl::OkStatus();
}

void PipeReporter::OnStep(const engine::StepMetrics& m, engine::Trainer& trainer) {
  // Progress on the log steps only: the loss stays on the device on the others.
  const bool send = m.iteration % log_interval_ == 0 || m.iteration == m.train_iterations;
  seconds_ += m.seconds;
  if (send) {
    UpdateProgress(m, trainer.memory());
    Phase(mt::v1::RANK_PHASE_TRAINING);
  }
  double blocking_seconds = 0;
  for (const parallel::CommTime& c : trainer.TakeCommunication()) {
    observability_->AddCommunication(c.collective, c.group, c.seconds, c.calls);
    if (ComputeClock::BlocksThePasses(c.group)) blocking_seconds += c.seconds;
  }
  const double compute = compute_clock_.Take(blocking_seconds, std::chrono::steady_clock::now());
  if (beacon_ != nullptr) beacon_->AddComputeSeconds(compute);
  observability_->OnStep(m, send, [&] { return trainer.memory(); });
}

void PipeReporter::UpdateProgress(const engine::StepMetrics& m, const engine::MemoryStats& mem) {
  progress_.set_step(m.iteration);
  progress_.set_total_steps(m.train_iterations);
  progress_.set_consumed_samples(m.consumed_samples);
  progress_.set_loss(m.interval_loss);
  progress_.set_learning_rate(m.learning_rate);
  progress_.set_grad_norm(m.grad_norm);
  progress_.set_loss_scale(m.loss_scale);
  progress_.set_skipped_steps(m.skipped_total);
  // The interval's figures: a single step's host time is only its queueing time on a GPU.
  const bool interval = m.interval_tokens_per_second > 0;
  progress_.set_tokens_per_second(interval ? m.interval_tokens_per_second : m.tokens_per_second);
  progress_.set_step_seconds(interval ? static_cast<double>(m.tokens) / m.interval_tokens_per_second
                                      : m.seconds);
  progress_.set_mfu(interval ? m.interval_mfu : m.mfu);
  progress_.set_memory_allocated_bytes(mem.allocated_bytes);
  progress_.set_memory_reserved_bytes(mem.reserved_bytes);
  progress_.set_memory_peak_bytes(mem.peak_allocated_bytes);
  const double per_step = seconds_ / std::max<int64_t>(1, m.iteration - first_step_ + 1);
  progress_.set_eta_seconds(per_step * static_cast<double>(m.train_iterations - m.iteration));
  *progress_.mutable_time() = TimeUtil::NanosecondsToTimestamp(absl::GetCurrentTimeNanos());
}

void PipeReporter::OnEval(const engine::EvalMetrics& e, int64_t consumed_samples) {
  progress_.set_validation_loss(e.loss);
  progress_.set_validation_perplexity(e.perplexity);
  progress_.set_validation_step(e.iteration);
  Phase(mt::v1::RANK_PHASE_TRAINING);
  observability_->OnEval(e, consumed_samples);
}

void PipeReporter::OnSaved(const checkpoint::SaveInfo& info) {
  mt::v1::RankReport r;
  r.set_phase(mt::v1::RANK_PHASE_TRAINING);
  *r.mutable_progress() = progress_;
  mt::v1::CheckpointReport* c = r.mutable_checkpoint();
  c->set_step(info.step);
  c->set_directory(info.directory);
  c->set_size_bytes(info.bytes);
  c->set_seconds(info.seconds);
  Send(r);
}

void PipeReporter::OnSaveFailed(int64_t step, const absl::Status& error) {
  mt::v1::RankReport r;
  mt::v1::CheckpointSaveFailure* f = r.mutable_checkpoint_save_failure();
  f->set_step(step);
  f->set_error(std::string(error.message()).substr(0, 1024));
  Send(r);
}

void PipeReporter::OnTrainingEnded(engine::Trainer& trainer) {
  if (observability_ != nullptr) observability_->Finish(trainer.memory());
}

mt::v1::RankActivity ToRankActivity(engine::Activity a) {
  switch (a) {
    case engine::Activity::kData:
      return mt::v1::RANK_ACTIVITY_DATA;
    case engine::Activity::kForward:
      return mt::v1::RANK_ACTIVITY_FORWARD;
    case engine::Activity::kBackward:
      return mt::v1::RANK_ACTIVITY_BACKWARD;
    case engine::Activity::kOptimizer:
      return mt::v1::RANK_ACTIVITY_OPTIMIZER;
    case engine::Activity::kEval:
      return mt::v1::RANK_ACTIVITY_EVAL;
    case engine::Activity::kCollective:
      return mt::v1::RANK_ACTIVITY_COLLECTIVE;
    case engine::Activity::kSave:
      return mt::v1::RANK_ACTIVITY_SAVE;
    case engine::Activity::kLoad:
      return mt::v1::RANK_ACTIVITY_LOAD;
  }
  return mt::v1::RANK_ACTIVITY_UNSPECIFIED;
}

void PipeReporter::Send(const mt::v1::RankReport& r) {
  if (absl::Status s = writer_.Write(r); !s.ok() && !warned_) {
    MT_LOG(WARNING) << "progress reports stop: " << s.message();
    warned_ = true;
  }
}

}  // namespace mt::train
