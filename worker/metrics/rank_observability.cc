#include "worker/metrics/rank_observability.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/logging.h"

namespace mt::worker::metrics {

int ReporterRank(const mt::v1::Layout& layout) {
  const int per_stage = std::max(1, layout.tensor_model_parallel_size()) *
                        std::max(1, layout.context_parallel_size()) *
                        std::max(1, layout.data_parallel_size());
  return (std::max(1, layout.pipeline_model_parallel_size()) - 1) * per_stage;
}

absl::StatusOr<std::unique_ptr<RankObservability>> RankObservability::Create(
    const mt::v1::JobSpec& spec, const mt::v1::Assignment& assignment,
    const engine::TrainPlan& plan, ReportWriter writer) {
  std::unique_ptr<RankObservability> o(new RankObservability(writer));
  const std::string& dir = spec.logging().tensorboard_dir();
  if (!dir.empty() && assignment.coordinates().rank() == ReporterRank(assignment.layout())) {
    TensorBoardOptions options;
    options.world_size = std::max(1, assignment.layout().world_size());
    options.flops_per_token = plan.flops_per_token;
    options.global_batch_size = plan.global_batch_size;
    absl::StatusOr<std::unique_ptr<TensorBoardLogger>> logger =
        TensorBoardLogger::Create(dir, options, absl::Now());
    if (!logger.ok()) return logger.status();
    o->tensorboard_ = *std::move(logger);
    MT_LOG(INFO) << "TensorBoard events in " << o->tensorboard_->path();
  }
  return o;
}

void RankObservability::OnStep(const engine::StepMetrics& m, bool log_step,
                               const std::function<engine::MemoryStats()>& memory) {
  const absl::Time now = absl::Now();
  telemetry_.AddStep(m);
  if (tensorboard_ != nullptr) tensorboard_->OnStep(m, now);
  if (!log_step && !telemetry_.Due(now)) return;
  const engine::MemoryStats mem = memory();
  if (writer_.enabled()) Send(telemetry_.Take(mem, now));
  if (tensorboard_ != nullptr && log_step) tensorboard_->OnMemory(mem, m.iteration, now);
}

void RankObservability::OnEval(const engine::EvalMetrics& e, int64_t consumed_samples) {
  if (tensorboard_ != nullptr) tensorboard_->OnEval(e, consumed_samples, absl::Now());
}

void RankObservability::Finish(const engine::MemoryStats& memory) {
  const absl::Time now = absl::Now();
  if (writer_.enabled() && telemetry_.Due(absl::InfiniteFuture())) {
    Send(telemetry_.Take(memory, now));
  }
  if (tensorboard_ != nullptr) {
    if (absl::Status s = tensorboard_->Flush(); !s.ok()) MT_LOG(WARNING) << "TensorBoard: " << s;
  }
}

void RankObservability::Send(const mt::v1::RankTelemetry& telemetry) {
  mt::v1::RankReport report;
  report.set_phase(mt::v1::RANK_PHASE_TRAINING);
  *report.mutable_telemetry() = telemetry;
  // A daemon that went away is the progress reporter's to notice; telemetry is best effort.
  (void)writer_.Write(report);
}

}  // namespace mt::worker::metrics
