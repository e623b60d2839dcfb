// `mt-worker train`'s SessionReporter (session_reporter.h): the checkpoint choice (each
// damaged checkpoint skipped) and every save as "mt-worker train: ..." lines on stderr, and
// Megatron's TensorBoard scalars in logging.tensorboard_dir. The trainer prints the progress
// lines itself (TrainerOptions::log_progress).
// Thread-compatible: the training thread drives it.
#ifndef MT_WORKER_TRAIN_LOG_REPORTER_H_
#define MT_WORKER_TRAIN_LOG_REPORTER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "worker/metrics/tensorboard_logger.h"
#include "worker/train/session_reporter.h"

namespace mt::train {

class LogReporter : public SessionReporter {
 public:
  // `tensorboard_dir`: empty = no TensorBoard files.
  explicit LogReporter(std::string tensorboard_dir)
      : tensorboard_dir_(std::move(tensorboard_dir)) {}

  void OnSkippedCheckpoint(const std::string& problem) override;
  void OnLoadChosen(const std::string& directory, int64_t step) override;
  void OnNoCheckpoint(const std::string& path) override;
  void OnCheckpointLoaded(const LoadedCheckpoint&) override {}
  absl::Status OnTrainingStarted(engine::Trainer& trainer) override;
  void OnStep(const engine::StepMetrics& m, engine::Trainer& trainer) override;
  void OnEval(const engine::EvalMetrics& e, int64_t consumed_samples) override;
  void OnSaved(const checkpoint::SaveInfo& info) override;
  void OnSaveFailed(int64_t step, const absl::Status& error) override;
  void OnTrainingEnded(engine::Trainer& trainer) override;

 private:
  const std::string tensorboard_dir_;
  std::unique_ptr<worker::metrics::TensorBoardLogger> tensorboard_;
};

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_LOG_REPORTER_H_
