// One rank's whole run, written once for both front ends (`mt-train --assignment FILE`,
// rank_command.h, and `mt-worker train`, train_command.h):
//
//   1. choose the checkpoint to start from (verified, falling back past damaged ones, each
//      of which is reported), none = from scratch
//   2. this rank's data loaders at the checkpoint's data position
//   3. build the trainer and restore the checkpoint
//   4. the checkpointer (checkpoint.save_dir), its host buffer for async saves
//   5. train: progress and evaluations to the reporter, a save every save_interval steps (after
//      the evaluation of the same step, so that a resumed run validates on the same batches as
//      an undisturbed one), stop between steps when `stop_signal` says so (every rank at the
//      same step: the ranks agree over the world's collectives)
//   6. save the last step (or where the run stopped), wait for the saves in flight
//
// A failed save, sync or async, always ends the session with that failure: a later save's
// success never hides it.
// Thread-compatible: runs on the calling thread.
#ifndef MT_WORKER_TRAIN_SESSION_H_
#define MT_WORKER_TRAIN_SESSION_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/engine/data_sources.h"
#include "worker/engine/trainer.h"
#include "worker/train/session_reporter.h"

namespace mt::train {

struct SessionConfig {
  // The resolved spec (defaults applied, global batch set: spec::ResolveForLayout).
  mt::v1::JobSpec spec;
  // What to start from: a save directory, a checkpoint or a Hugging Face directory; empty =
  // from scratch.
  std::string load_path;
  // Where this rank sits for the choice (keep_own_files, tp/pp, stage_device).
  checkpoint::LoadOptions load;
  // tp_rank/tp_size of this rank; the rest comes from spec.checkpoint.
  checkpoint::RestoreOptions restore;
  // This rank's data loaders, starting after `consumed_samples`.
  std::function<absl::StatusOr<engine::DataSources>(int64_t consumed_samples)> make_data;
  engine::TrainerOptions trainer;
  // job_id, attempt, layout, coordinates; save_dir, async_save and spec come from `spec`.
  checkpoint::CheckpointerOptions checkpointer;
  // How the ranks of a save meet (not owned); null = a world of one (a LocalExchange).
  checkpoint::SaveExchange* exchange = nullptr;
  // Polled between steps: the signal that asks the run to stop, 0 = go on. Null = never.
  std::function<int()> stop_signal;
};

// Where a session failed, for the front ends' messages and exit codes.
enum class SessionStage {
  kNone,              // no failure
  kChooseCheckpoint,  // reading or verifying what load_path names
  kData,              // make_data
  kBuildTrainer,      // engine::Trainer::Create
  kRestore,           // opening the chosen checkpoint or restoring the trainer from it
  kCheckpointer,      // checkpoint.save_dir (Checkpointer::Create)
  kPrepareSave,       // the async save's host buffer
  kReporter,          // SessionReporter::OnTrainingStarted (e.g. TensorBoard)
  kTraining,          // a step or an evaluation
  kSave,              // a save, sync or async
};

struct SessionResult {
  absl::Status status;
  SessionStage failed_at = SessionStage::kNone;
  std::string load_dir;  // the checkpoint chosen, empty when none
  engine::StepMetrics last_step;
  engine::EvalMetrics last_eval;
  bool evaluated = false;
  int64_t iteration = 0;
  int64_t train_iterations = 0;
  double seconds = 0;   // summed step times of this session
  int64_t tokens = 0;   // tokens of this session's steps
  bool saving = false;  // checkpoint.save_dir is set
  int saves = 0;        // successful saves
  int stop_signal = 0;  // the signal that stopped the run, 0 = none
};

SessionResult RunSession(const SessionConfig& config, SessionReporter& reporter);

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_SESSION_H_
