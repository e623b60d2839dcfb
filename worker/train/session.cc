#include "worker/train/session.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <utility>

#include "absl/time/clock.h"
#include "common/base/logging.h"
#include "worker/checkpoint/trainer_state.h"
#include "worker/parallel/collectives.h"

namespace mt::train {
namespace {

// The steps of one session; RunSession drives them in order. Not thread-safe.
class Session {
 public:
  Session(const SessionConfig& config, SessionReporter& reporter)
      : config_(config), reporter_(reporter), ckpt_spec_(config.spec.checkpoint()) {}

  SessionResult Run() {
    if (ChooseCheckpoint() && BuildTrainer() && Restore() && MakeCheckpointer() && Start()) {
      Train();
      FinalSave();
    }
    if (trainer_ != nullptr) {
      result_.iteration = trainer_->iteration();
      result_.train_iterations = trainer_->plan().train_iterations;
    }
    return std::move(result_);
  }

 private:
  // False (and the result says why) when `status` is an error.
  bool Check(const absl::Status& status, SessionStage stage) {
    if (status.ok()) return true;
    result_.status = status;
    result_.failed_at = stage;
    return false;
  }

  bool ChooseCheckpoint() {
    if (config_.load_path.empty()) return true;
    const absl::Time start = absl::Now();
    auto chosen = checkpoint::ChooseLoad(config_.load_path, config_.load);
    load_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
    if (!Check(chosen.status(), SessionStage::kChooseCheckpoint)) return false;
    load_ = *std::move(chosen);
    if (!load_.has_value()) {
      reporter_.OnNoCheckpoint(config_.load_path);
      return true;
    }
    for (const std::string& problem : load_->problems) reporter_.OnSkippedCheckpoint(problem);
    result_.load_dir = load_->dir;
    reporter_.OnLoadChosen(load_->dir, load_->manifest.step());
    return true;
  }

  bool weights_only() const {
    return load_.has_value() && (ckpt_spec_.finetune() || !load_->manifest.has_trainer());
  }

  bool BuildTrainer() {
    const int64_t consumed =
        load_.has_value() && !weights_only() ? load_->manifest.trainer().consumed_samples() : 0;
    absl::StatusOr<engine::DataSources> data = config_.make_data(consumed);
    if (!Check(data.status(), SessionStage::kData)) return false;
    auto trainer = engine::Trainer::Create(config_.spec, config_.trainer, std::move(data->train),
                                           std::move(data->valid));
    if (!Check(trainer.status(), SessionStage::kBuildTrainer)) return false;
    trainer_ = *std::move(trainer);
    return true;
  }

  // From the bytes the choice verified (or their device copies), not a second read.
  bool Restore() {
    if (!load_.has_value()) return true;
    Tell(engine::Activity::kLoad, load_->manifest.step());
    const absl::Time start = absl::Now();
    auto source = checkpoint::OpenLoadSource(*load_);
    if (!Check(source.status(), SessionStage::kRestore)) return false;
    checkpoint::RestoreOptions restore = config_.restore;
    restore.load_optimizer = !ckpt_spec_.no_load_optim();
    restore.load_rng = !ckpt_spec_.no_load_rng();
    restore.weights_only = weights_only();
    if (!Check(checkpoint::RestoreTrainer(*trainer_, **source, restore), SessionStage::kRestore)) {
      return false;
    }
    source->reset();
    load_->files.reset();       // the files kept in memory for the restore
    load_->attachment.reset();  // and their copies on the device
    LoadedCheckpoint loaded;
    loaded.step = load_->manifest.step();
    loaded.directory = load_->dir;
    loaded.bytes_read = load_->bytes_read;
    loaded.seconds = load_seconds_ + absl::ToDoubleSeconds(absl::Now() - start);
    reporter_.OnCheckpointLoaded(loaded);
    return true;
  }

  bool MakeCheckpointer() {
    if (ckpt_spec_.save_dir().empty()) return true;
    checkpoint::CheckpointerOptions o = config_.checkpointer;
    o.save_dir = ckpt_spec_.save_dir();
    o.async_save = ckpt_spec_.async_save();
    o.spec = config_.spec;
    checkpoint::SaveExchange* exchange =
        config_.exchange != nullptr ? config_.exchange : &local_exchange_;
    auto saver = checkpoint::Checkpointer::Create(o, exchange);
    if (!Check(saver.status(), SessionStage::kCheckpointer)) return false;
    saver_ = *std::move(saver);
    result_.saving = true;
    // The snapshot's (pinned) host buffer now, not in the first async save's stall.
    return !o.async_save || Check(saver_->Prepare(*trainer_), SessionStage::kPrepareSave);
  }

  bool Start() { return Check(reporter_.OnTrainingStarted(*trainer_), SessionStage::kReporter); }

  // Takes the saves finished so far; the first failure stays the session's save status.
  void TakeSaves() {
    if (saver_ == nullptr) return;
    for (const checkpoint::SaveInfo& info : saver_->TakeFinished()) {
      if (!info.status.ok()) {
        if (save_status_.ok()) {
          save_status_ = info.status;
          reporter_.OnSaveFailed(info.step, info.status);
        }
        continue;
      }
      ++result_.saves;
      reporter_.OnSaved(info);
    }
  }

  void Tell(engine::Activity a, int64_t step) const {
    if (config_.trainer.on_activity) config_.trainer.on_activity(a, step);
  }

  // Saves the current step unless it is saved or a save has failed: a new save's OK must not
  // replace an earlier failure.
  void Save() {
    if (saver_ == nullptr || saver_->last_saved_step() == trainer_->iteration() ||
        !save_status_.ok()) {
      return;
    }
    Tell(engine::Activity::kSave, trainer_->iteration());
    save_status_ = saver_->Save(*trainer_, result_.last_step.loss,
                                result_.evaluated ? result_.last_eval.loss : std::nan(""));
    if (!save_status_.ok()) reporter_.OnSaveFailed(trainer_->iteration(), save_status_);
    TakeSaves();
  }

  // Whether the run goes on; every rank stops at the same step (a save on stop needs them all).
  bool KeepGoing() {
    double stop = 0;
    if (config_.stop_signal) {
      const int sig = config_.stop_signal();
      if (sig != 0) result_.stop_signal = sig;
      stop = sig != 0 ? 1.0 : 0.0;
    }
    if (saver_ != nullptr && config_.trainer.collectives != nullptr) {
      Tell(engine::Activity::kCollective, trainer_->iteration());
      auto any = config_.trainer.collectives->MaxScalarOverWorld(stop);
      if (any.ok()) stop = *any;
    }
    return stop == 0.0;
  }

  void Train() {
    const int64_t save_interval = ckpt_spec_.save_interval();
    const absl::Status status = trainer_->Train(
        [&](const engine::StepMetrics& m) {
          result_.last_step = m;
          result_.seconds += m.seconds;
          result_.tokens += m.tokens;
          reporter_.OnStep(m, *trainer_);
          TakeSaves();
          return true;
        },
        [&](const engine::EvalMetrics& e) {
          result_.last_eval = e;
          result_.evaluated = true;
          reporter_.OnEval(e, trainer_->consumed_samples());
        },
        // After the step's evaluation: its checkpoint resumes validation where it stands.
        [&] {
          if (save_interval > 0 && trainer_->iteration() % save_interval == 0) Save();
          return save_status_.ok() && KeepGoing();
        });
    reporter_.OnTrainingEnded(*trainer_);
    Check(status, SessionStage::kTraining);
  }

  // The last step, or where a stop ended the run, is always saved (not after a failure).
  void FinalSave() {
    if (!result_.status.ok()) return;
    Save();
    if (saver_ != nullptr) {
      saver_->Wait();
      TakeSaves();
    }
    Check(save_status_, SessionStage::kSave);
  }

  const SessionConfig& config_;
  SessionReporter& reporter_;
  const mt::v1::CheckpointSpec& ckpt_spec_;
  SessionResult result_;
  std::optional<checkpoint::LoadChoice> load_;
  double load_seconds_ = 0;
  std::unique_ptr<engine::Trainer> trainer_;
  checkpoint::LocalExchange local_exchange_;
  std::unique_ptr<checkpoint::Checkpointer> saver_;
  absl::Status save_status_;
};

}  // namespace

SessionResult RunSession(const SessionConfig& config, SessionReporter& reporter) {
  return Session(config, reporter).Run();
}

}  // namespace mt::train
