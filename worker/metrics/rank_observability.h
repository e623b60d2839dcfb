// Everything a rank does for observability besides its progress line, in one place for the
// service's session reporter (worker/train/pipe_reporter.cc):
//   - telemetry for the daemon's Prometheus endpoint, over the report pipe, at least every
//     second (rank_telemetry.h);
//   - TensorBoard event files in logging.tensorboard_dir, written by the rank that speaks for
//     the job (last pipeline stage, tp = cp = dp = 0), as Megatron writes them from one rank
//     (tensorboard_logger.h).
// Thread-compatible: the training thread drives it.
#ifndef MT_WORKER_METRICS_RANK_OBSERVABILITY_H_
#define MT_WORKER_METRICS_RANK_OBSERVABILITY_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "mt/v1/job_spec.pb.h"
#include "mt/v1/worker_service.pb.h"
#include "worker/engine/trainer.h"
#include "worker/metrics/rank_telemetry.h"
#include "worker/metrics/tensorboard_logger.h"
#include "worker/report/report_channel.h"

namespace mt::worker::metrics {

class RankObservability {
 public:
  // FailedPrecondition naming logging.tensorboard_dir when the event file cannot be created.
  static absl::StatusOr<std::unique_ptr<RankObservability>> Create(
      const mt::v1::JobSpec& spec, const mt::v1::Assignment& assignment,
      const engine::TrainPlan& plan, ReportWriter writer);

  // After every step. `log_step`: the step ends a logging interval. `memory` is called only
  // when needed.
  void OnStep(const engine::StepMetrics& m, bool log_step,
              const std::function<engine::MemoryStats()>& memory);
  void OnEval(const engine::EvalMetrics& e, int64_t consumed_samples);
  // Time the step spent in one collective over one group (Trainer::TakeCommunication, see
  // TelemetryAccumulator::AddCommunication); call before OnStep.
  void AddCommunication(const std::string& collective, const std::string& group, double seconds,
                        int64_t calls) {
    telemetry_.AddCommunication(collective, group, seconds, calls);
  }
  // Sends what is left and flushes the event file.
  void Finish(const engine::MemoryStats& memory);

  // Whether this rank writes TensorBoard files.
  bool writes_tensorboard() const { return tensorboard_ != nullptr; }

 private:
  explicit RankObservability(ReportWriter writer) : writer_(writer) {}
  void Send(const mt::v1::RankTelemetry& telemetry);

  ReportWriter writer_;
  TelemetryAccumulator telemetry_;
  std::unique_ptr<TensorBoardLogger> tensorboard_;
};

// The rank whose progress speaks for the job: last pipeline stage, tp = cp = dp = 0
// (the coordinator's choice too, coordinator/jobs/job_manager.h).
int ReporterRank(const mt::v1::Layout& layout);

}  // namespace mt::worker::metrics

#endif  // MT_WORKER_METRICS_RANK_OBSERVABILITY_H_
