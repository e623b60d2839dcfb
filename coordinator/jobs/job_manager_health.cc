// JobManager's hang and straggler detection (job_manager.h, "Hang and straggler detection"):
// beacons and phase reports feed each attempt's HangDetector and StragglerTracker; CheckHangs
// restarts a job with a hung rank through the failure path (FailOrRestart: counted against
// max_restarts), also one whose rank never reaches training (SCHEDULED, from the placement on),
// and keeps "no progress for N s" on every SCHEDULED or RUNNING job's progress.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/logging.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/jobs/job_state.h"
#include "google/protobuf/util/time_util.h"

namespace mt::coordinator {
namespace {

// A stall is shown ("no progress for N s") once it is this long and 3 p99 step times.
constexpr absl::Duration kShowStallAfter = absl::Seconds(5);

}  // namespace

void JobManager::StartHealth(JobEntry* entry) {
  const mt::v1::RestartPolicy& r = entry->job.spec().restart();
  const int world = static_cast<int>(entry->ranks.size());
  entry->hang = std::make_unique<HangDetector>(world, HangConfig::FromSpec(r), clock_->Now());
  entry->stragglers = std::make_unique<StragglerTracker>(world, r.straggler_threshold(),
                                                         r.straggler_window_steps());
}

void JobManager::OnBeacon(JobEntry* entry, const mt::v1::RankReport& report) {
  if (entry->hang == nullptr) return;
  entry->hang->OnBeacon(report.rank(), report.activity(), report.activity_step(), clock_->Now());
  if (report.step_compute_seconds_size() == 0) return;
  entry->stragglers->Add(
      report.rank(), {report.step_compute_seconds().begin(), report.step_compute_seconds().end()});
  for (const StragglerTracker::Change& c : entry->stragglers->Update()) {
    const std::string where =
        absl::StrCat("rank ", c.rank, " on worker ", entry->ranks[c.rank].worker_id);
    const int window = entry->stragglers->window();
    const std::string event =
        c.straggling
            ? absl::StrFormat(
                  "straggler: %s computes %.2fx the other ranks' median time per step over its "
                  "last %d steps (restart.straggler_threshold %.2f)",
                  where, c.ratio, window, entry->stragglers->threshold())
            : absl::StrFormat("%s is no longer a straggler (%.2fx the other ranks' median)", where,
                              c.ratio);
    // An event that is no transition; a store failure loses only this note.
    if (absl::Status s = RecordEvent(entry, event); !s.ok()) {
      MT_LOG(WARNING) << entry->job.id() << ": recording \"" << event << "\": " << s.message();
    }
  }
}

bool JobManager::CheckHang(JobEntry* entry, absl::Time now) {
  HangDetector& hang = *entry->hang;
  mt::v1::Progress* progress = entry->job.mutable_progress();
  if (std::optional<Stall> h = hang.Hung(now); h.has_value()) {
    ++hangs_detected_;
    const std::string cause = entry->job.state() == mt::v1::JOB_STATE_SCHEDULED
                                  ? StartupHangCause(*entry, *h)
                                  : HangCause(*entry, *h, hang.P99StepTime());
    progress->set_no_progress_seconds(0);
    progress->clear_no_progress_detail();
    return FailOrRestart(entry, cause).ok();
  }
  const absl::Duration show = std::max(kShowStallAfter, 3 * hang.P99StepTime());
  std::optional<Stall> s = hang.Stalled(now, show);
  const double seconds = s.has_value() ? std::floor(absl::ToDoubleSeconds(s->stalled_for)) : 0;
  if (seconds == progress->no_progress_seconds()) return false;
  progress->set_no_progress_seconds(seconds);
  if (s.has_value()) {
    progress->set_no_progress_detail(absl::StrCat(
        "rank ", s->rank, " on ", entry->ranks[s->rank].worker_id, ", ", ActivityName(s->activity),
        s->step > 0 ? absl::StrCat(" of step ", s->step) : ""));
  } else {
    progress->clear_no_progress_detail();
  }
  ++entry->version;  // watchers (mtctl top, describe --watch) see it; not worth a write
  return false;
}

std::string JobManager::HangCause(const JobEntry& entry, const Stall& h, absl::Duration p99) {
  return absl::StrCat(
      "hung: rank ", h.rank, " on worker ", entry.ranks[h.rank].worker_id, " (node ",
      h.rank < entry.job.placement_size() ? entry.job.placement(h.rank).node() : "?",
      ") made no progress for ", absl::ToInt64Seconds(h.stalled_for), " s in ",
      ActivityName(h.activity), h.step > 0 ? absl::StrCat(" of step ", h.step) : "", " (timeout ",
      absl::ToInt64Seconds(h.timeout), " s: max(restart.hang_step_multiplier x p99 step time ",
      absl::StrFormat("%.3g", absl::ToDoubleSeconds(p99)),
      " s, restart.hang_timeout_floor_seconds), or restart.save_load_timeout_seconds while "
      "saving or loading)");
}

std::string JobManager::StartupHangCause(const JobEntry& entry, const Stall& h) {
  return absl::StrCat(
      "hung at startup: rank ", h.rank, " on worker ", entry.ranks[h.rank].worker_id, " (node ",
      h.rank < entry.job.placement_size() ? entry.job.placement(h.rank).node() : "?",
      ") did not reach training: ", StartupPhaseName(h.phase, h.activity), ", no progress for ",
      absl::ToInt64Seconds(h.stalled_for), " s since the placement or its last report (timeout ",
      absl::ToInt64Seconds(h.timeout),
      " s: restart.hang_timeout_floor_seconds, or restart.save_load_timeout_seconds while "
      "loading)");
}

void JobManager::CheckHangs() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  bool changed = false;
  // Copied: a restart unindexes the job.
  const std::vector<int64_t> placed(placed_.begin(), placed_.end());
  for (int64_t id : placed) {
    JobEntry* entry = jobs_.at(id).get();
    // SCHEDULED: from the placement until every rank trains (a rank that never gets there).
    const mt::v1::JobState state = entry->job.state();
    if (state != mt::v1::JOB_STATE_RUNNING && state != mt::v1::JOB_STATE_SCHEDULED) continue;
    if (entry->hang == nullptr) continue;
    changed = CheckHang(entry, now) || changed;
  }
  if (changed) ScheduleLocked();
}

std::vector<JobManager::RankHealth> JobManager::RankHealthSnapshot() {
  absl::MutexLock lock(&mu_);
  std::vector<RankHealth> out;
  for (int64_t id : placed_) {
    const JobEntry& e = *jobs_.at(id);
    if (e.job.state() != mt::v1::JOB_STATE_RUNNING || e.stragglers == nullptr) continue;
    for (int r = 0; r < static_cast<int>(e.ranks.size()); ++r) {
      if (auto ratio = e.stragglers->Ratio(r); ratio.has_value()) {
        out.push_back({e.job.id(), r, *ratio});
      }
    }
  }
  return out;
}

std::map<std::string, double> JobManager::NoProgressSeconds() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, double> out;
  const absl::Time now = clock_->Now();
  for (int64_t id : placed_) {
    const JobEntry& e = *jobs_.at(id);
    if (e.job.state() != mt::v1::JOB_STATE_RUNNING || e.hang == nullptr) continue;
    out[e.job.id()] = absl::ToDoubleSeconds(e.hang->LongestStall(now));
  }
  return out;
}

int64_t JobManager::HangsDetected() {
  absl::MutexLock lock(&mu_);
  return hangs_detected_;
}

int64_t JobManager::CheckpointSaveFailures() {
  absl::MutexLock lock(&mu_);
  return save_failures_;
}

}  // namespace mt::coordinator
