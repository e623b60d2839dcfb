#include "worker/train/log_reporter.h"

#include <cstdio>

#include "absl/time/clock.h"

namespace mt::train {

void LogReporter::OnSkippedCheckpoint(const std::string& problem) {
  std::fprintf(stderr, "mt-worker train: skipped checkpoint %s\n", problem.c_str());
}

void LogReporter::OnLoadChosen(const std::string& directory, int64_t step) {
  std::fprintf(stderr, "mt-worker train: loading %s (step %lld)\n", directory.c_str(),
               static_cast<long long>(step));
}

void LogReporter::OnNoCheckpoint(const std::string& path) {
  std::fprintf(stderr, "mt-worker train: no checkpoint in %s; training from scratch\n",
               path.c_str());
}

absl::Status LogReporter::OnTrainingStarted(engine::Trainer& trainer) {
  if (tensorboard_dir_.empty()) return absl::OkStatus();
  worker::metrics::TensorBoardOptions tb;
  tb.flops_per_token = trainer.plan().flops_per_token;
  tb.global_batch_size = trainer.plan().global_batch_size;
  auto logger = worker::metrics::TensorBoardLogger::Create(tensorboard_dir_, tb, absl::Now());
  if (!logger.ok()) return logger.status();
  tensorboard_ = *std::move(logger);
  return absl::OkStatus();
}

void LogReporter::OnStep(const engine::StepMetrics& m, engine::Trainer&) {
  if (tensorboard_ != nullptr) tensorboard_->OnStep(m, absl::Now());
}

void LogReporter::OnEval(const engine::EvalMetrics& e, int64_t consumed_samples) {
  if (tensorboard_ != nullptr) tensorboard_->OnEval(e, consumed_samples, absl::Now());
}

void LogReporter::OnSaved(const checkpoint::SaveInfo& info) {
  std::fprintf(stderr, "mt-worker train: saved %s (%lld bytes, %.3f s)\n", info.directory.c_str(),
               static_cast<long long>(info.bytes), info.seconds);
}

void LogReporter::OnSaveFailed(int64_t step, const absl::Status& error) {
  std::fprintf(stderr, "mt-worker train: saving step %lld failed: %s\n",
               static_cast<long long>(step), std::string(error.message()).c_str());
}

void LogReporter::OnTrainingEnded(engine::Trainer&) {
  if (tensorboard_ == nullptr) return;
  if (absl::Status s = tensorboard_->Flush(); !s.ok()) {
    std::fprintf(stderr, "mt-worker train: TensorBoard: %s\n", std::string(s.message()).c_str());
  }
}

}  // namespace mt::train
