// The service's SessionReporter (session_reporter.h): a rank's phases, progress, evaluations,
// checkpoint saves and loads go to its daemon over the report pipe (worker/report), together
// with the telemetry and TensorBoard files of RankObservability; the checkpoint choice,
// including each damaged checkpoint skipped, goes to the rank's log, which the daemon keeps
// and sends to the coordinator with the rank's exit report.
// Thread-compatible: the training thread drives it.
#ifndef MT_WORKER_TRAIN_PIPE_REPORTER_H_
#define MT_WORKER_TRAIN_PIPE_REPORTER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "mt/v1/job_spec.pb.h"
#include "mt/v1/worker_service.pb.h"
#include "worker/metrics/rank_observability.h"
#include "worker/report/progress_beacon.h"
#include "worker/report/report_channel.h"
#include "worker/train/compute_clock.h"
#include "worker/train/session_reporter.h"

namespace mt::train {

class PipeReporter : public SessionReporter {
 public:
  // `spec` and `assignment` outlive the reporter.
  PipeReporter(worker::ReportWriter writer, const mt::v1::JobSpec& spec,
               const mt::v1::Assignment& assignment);

  // A phase report with the progress so far (STARTING before the session runs).
  void Phase(mt::v1::RankPhase phase);
  // Each step's compute time (compute_clock.h: forward and backward less blocking
  // collectives) goes to `beacon`
  // (outlives the reporter; null = nowhere).
  void set_beacon(worker::ProgressBeacon* beacon) { beacon_ = beacon; }
  // The trainer's activity changes (its on_activity listener, on the training thread): they
  // time each step's compute (compute_clock.h).
  void OnActivity(engine::Activity activity) {
    compute_clock_.OnActivity(activity, std::chrono::steady_clock::now());
  }

  void OnSkippedCheckpoint(const std::string& problem) override;
  void OnLoadChosen(const std::string& directory, int64_t step) override;
  void OnNoCheckpoint(const std::string& path) override;
  void OnCheckpointLoaded(const LoadedCheckpoint& loaded) override;
  absl::Status OnTrainingStarted(engine::Trainer& trainer) override;
  void OnStep(const engine::StepMetrics& m, engine::Trainer& trainer) override;
  void OnEval(const engine::EvalMetrics& e, int64_t consumed_samples) override;
  void OnSaved(const checkpoint::SaveInfo& info) override;
  void OnSaveFailed(int64_t step, const absl::Status& error) override;
  void OnTrainingEnded(engine::Trainer& trainer) override;

 private:
  // The progress figures of a log step (m.interval_loss is the mean since the last one).
  void UpdateProgress(const engine::StepMetrics& m, const engine::MemoryStats& mem);
  void Send(const mt::v1::RankReport& r);

  worker::ReportWriter writer_;
  const mt::v1::JobSpec& spec_;
  const mt::v1::Assignment& assignment_;
  std::unique_ptr<worker::metrics::RankObservability> observability_;
  mt::v1::Progress progress_;
  double seconds_ = 0;
  int64_t first_step_ = 1;
  int64_t log_interval_ = 1;
  bool warned_ = false;
  worker::ProgressBeacon* beacon_ = nullptr;
  ComputeClock compute_clock_;
};

// The beacon's activity for the trainer's (worker/engine/activity.h).
mt::v1::RankActivity ToRankActivity(engine::Activity a);

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_PIPE_REPORTER_H_
