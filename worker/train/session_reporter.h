// Where one rank session (session.h) tells what happens: the checkpoint it starts from and the
// damaged ones it skipped, progress, evaluations, saves and a failed save. The front ends pick it:
// PipeReporter (pipe_reporter.h) for a rank of the service, reports to the daemon over the
// report pipe; LogReporter (log_reporter.h) for `mt-worker train`, lines on stderr;
// FakeSessionReporter (fake_session_reporter.h) records the calls for tests.
// Calls come from the session's (training) thread only: implementations need not be
// thread-safe.
#ifndef MT_WORKER_TRAIN_SESSION_REPORTER_H_
#define MT_WORKER_TRAIN_SESSION_REPORTER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/engine/trainer.h"

namespace mt::train {

// The checkpoint a session restored, with what choosing and restoring it cost.
struct LoadedCheckpoint {
  int64_t step = 0;
  std::string directory;
  int64_t bytes_read = 0;
  double seconds = 0;  // choosing (reading and verifying) + restoring
};

class SessionReporter {
 public:
  virtual ~SessionReporter() = default;

  // A damaged checkpoint passed over while choosing where to start (`problem` names it).
  virtual void OnSkippedCheckpoint(const std::string& problem) = 0;
  // The checkpoint chosen, before the restore.
  virtual void OnLoadChosen(const std::string& directory, int64_t step) = 0;
  // `path` (--load, load_dir or a restart's resume_from) holds no checkpoint.
  virtual void OnNoCheckpoint(const std::string& path) = 0;
  virtual void OnCheckpointLoaded(const LoadedCheckpoint& loaded) = 0;
  // The trainer is built (and restored): the first step comes next. An error ends the session.
  virtual absl::Status OnTrainingStarted(engine::Trainer& trainer) = 0;
  // After every step, before the session's saves for it.
  virtual void OnStep(const engine::StepMetrics& step, engine::Trainer& trainer) = 0;
  virtual void OnEval(const engine::EvalMetrics& eval, int64_t consumed_samples) = 0;
  // A save this rank finished (successful ones only: a failed save ends the session).
  virtual void OnSaved(const checkpoint::SaveInfo& info) = 0;
  // A save of step `step` failed with `error` (the session then ends with it; told once).
  virtual void OnSaveFailed(int64_t step, const absl::Status& error) = 0;
  // Training ended (done, stopped or failed), before the final save.
  virtual void OnTrainingEnded(engine::Trainer& trainer) = 0;
};

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_SESSION_REPORTER_H_
