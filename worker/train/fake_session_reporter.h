// A SessionReporter (session_reporter.h) that records what a session told it, for tests.
// `on_step` (optional) runs inside OnStep, e.g. to wait for a background save.
// Thread-compatible.
#ifndef MT_WORKER_TRAIN_FAKE_SESSION_REPORTER_H_
#define MT_WORKER_TRAIN_FAKE_SESSION_REPORTER_H_

#include <functional>
#include <string>
#include <vector>

#include "worker/train/session_reporter.h"

namespace mt::train {

class FakeSessionReporter : public SessionReporter {
 public:
  void OnSkippedCheckpoint(const std::string& problem) override { skipped.push_back(problem); }
  void OnLoadChosen(const std::string& directory, int64_t step) override {
    chosen.push_back(directory);
    chosen_step = step;
  }
  void OnNoCheckpoint(const std::string& path) override { no_checkpoint.push_back(path); }
  void OnCheckpointLoaded(const LoadedCheckpoint& l) override { loaded.push_back(l); }
  absl::Status OnTrainingStarted(engine::Trainer&) override {
    ++started;
    return start_status;
  }
  void OnStep(const engine::StepMetrics& m, engine::Trainer&) override {
    steps.push_back(m.iteration);
    if (on_step) on_step(m);
  }
  void OnEval(const engine::EvalMetrics& e, int64_t) override { evals.push_back(e.iteration); }
  void OnSaved(const checkpoint::SaveInfo& info) override { saved.push_back(info.step); }
  void OnSaveFailed(int64_t step, const absl::Status& error) override {
    save_failed.push_back(step);
  }
  void OnTrainingEnded(engine::Trainer&) override { ++ended; }

  absl::Status start_status;  // what OnTrainingStarted answers
  std::function<void(const engine::StepMetrics&)> on_step;

  std::vector<std::string> skipped;
  std::vector<std::string> chosen;
  int64_t chosen_step = -1;
  std::vector<std::string> no_checkpoint;
  std::vector<LoadedCheckpoint> loaded;
  int started = 0;
  std::vector<int64_t> steps;
  std::vector<int64_t> evals;
  std::vector<int64_t> saved;
  std::vector<int64_t> save_failed;  // steps whose save failed
  int ended = 0;
};

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_FAKE_SESSION_REPORTER_H_
