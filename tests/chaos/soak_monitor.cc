// The soak's monitor: the continuous checks of its invariants (soak.h), one tick at a time.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "google/protobuf/util/json_util.h"
#include "mt/v1/client_service.pb.h"
#include "tests/chaos/catalog_check.h"
#include "tests/chaos/rss_level.h"
#include "tests/chaos/soak_run.h"

namespace mt::chaos {
namespace {

constexpr absl::Duration kTick = absl::Seconds(1);
// The span of samples whose median is the coordinator's memory level (rss_level.h).
constexpr absl::Duration kLevelWindow = absl::Seconds(30);
// A rank whose parent is not a live worker daemon of the soak: the daemon's death kills its
// ranks at once (PR_SET_PDEATHSIG); allow for scheduling.
constexpr absl::Duration kOrphanGrace = absl::Seconds(10);
// A rank of an ended job: the coordinator stops the ranks of a job that ends (SIGTERM, then
// SIGKILL after --stop_grace_seconds = 5).
constexpr absl::Duration kEndedGrace = absl::Seconds(30);
// A rank of an older attempt: cut off from the coordinator it waits in a collective until the
// collective timeout (1 minute here) or until its daemon hears of the restart.
constexpr absl::Duration kOldAttemptGrace = absl::Seconds(120);
// Checkpoint reports trail the files (and wait out a coordinator outage): a mismatch counts
// when three checks kCatalogEvery apart all find it.
constexpr absl::Duration kCatalogEvery = absl::Seconds(10);
constexpr int kCatalogMisses = 3;

bool Terminal(mt::v1::JobState s) {
  return s == mt::v1::JOB_STATE_SUCCEEDED || s == mt::v1::JOB_STATE_FAILED ||
         s == mt::v1::JOB_STATE_CANCELLED;
}

}  // namespace

void Soak::Violation(const std::string& what) {
  const std::string line = absl::StrFormat("t=%.1fs %s", Elapsed(), what);
  std::fprintf(stderr, "[chaos] VIOLATION %s\n", line.c_str());
  report_.violations.push_back(line);
}

void Soak::Note(const std::string& what) {
  std::fprintf(stderr, "[chaos] t=%.1fs %s\n", Elapsed(), what.c_str());
}

bool Soak::TickUntil(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (true) {
    const absl::Time next = absl::Now() + kTick;
    Tick();
    if (done()) return true;
    if (absl::Now() >= end || Interrupted()) return false;
    absl::SleepFor(std::max(absl::ZeroDuration(), std::min(next, end) - absl::Now()));
  }
}

void Soak::Tick() {
  PollJobs();
  TrackRecoveries();
  CheckProcesses();
  SampleCoordinatorMemory();
  if (absl::Now() - last_catalog_check_ >= kCatalogEvery) CheckCatalogs(false);
  CheckCatalogs(true);
  KeepJobsInFlight();
}

std::vector<TrackedJob*> Soak::InFlight() {
  std::vector<TrackedJob*> out;
  for (TrackedJob& j : jobs_) {
    if (!j.ended) out.push_back(&j);
  }
  return out;
}

void Soak::PollJobs() {
  for (TrackedJob* job : InFlight()) {
    absl::StatusOr<mt::v1::Job> got = cluster_->Describe(job->id);
    if (!got.ok()) continue;  // the coordinator is away (a fault): next tick
    if (got->attempt() > job->last.attempt() &&
        job->last.state() != mt::v1::JOB_STATE_UNSPECIFIED) {
      Note(absl::StrCat(job->id, " restarted (attempt ", got->attempt(), "): ",
                        got->resume_step() > 0 ? absl::StrCat("from step ", got->resume_step())
                                               : std::string("from scratch")));
    }
    job->last = *std::move(got);
    if (Terminal(job->last.state())) OnJobEnded(*job);
  }
}

void Soak::OnJobEnded(TrackedJob& job) {
  job.ended = true;
  job.ended_at = absl::Now();
  report_.restarts += job.last.attempt();
  const mt::v1::Progress& p = job.last.progress();
  Variant& v = variants_[job.variant];
  Note(absl::StrFormat("%s %s at step %d, attempt %d: loss %.17g, validation loss %.17g", job.id,
                       mt::v1::JobState_Name(job.last.state()), p.step(), job.last.attempt(),
                       p.loss(), p.validation_loss()));
  if (job.last.state() != mt::v1::JOB_STATE_SUCCEEDED) {
    Violation(absl::StrCat(job.id, " ended ", mt::v1::JobState_Name(job.last.state()), ": ",
                           job.last.reason()));
    return;
  }
  if (p.step() != config_.train_iters) {
    Violation(absl::StrCat(job.id, " SUCCEEDED at step ", p.step(), ", not ", config_.train_iters));
    return;
  }
  if (job.reference) {
    v.loss = p.loss();
    v.validation_loss = p.validation_loss();
    return;
  }
  // Bit for bit: fp32 on CPU, the same layout, an exact resume.
  if (p.loss() != v.loss || p.validation_loss() != v.validation_loss) {
    Violation(absl::StrFormat(
        "%s (%s) ended with loss %.17g / validation %.17g; the undisturbed run: %.17g / %.17g",
        job.id, v.name, p.loss(), p.validation_loss(), v.loss, v.validation_loss));
    return;
  }
  ++report_.jobs_succeeded_exact;
}

void Soak::KeepJobsInFlight() {
  if (!submitting_) return;
  for (size_t v = 0; v < variants_.size(); ++v) {
    bool running = false;
    for (const TrackedJob& j : jobs_) running |= !j.ended && j.variant == static_cast<int>(v);
    if (!running) SubmitJob(static_cast<int>(v), false);
  }
}

std::map<std::string, pid_t> Soak::WorkerPids() {
  std::map<std::string, pid_t> out;
  for (const auto& [name, slot] : worker_slots_) {
    testutil::Subprocess* w = cluster_->worker(name);
    if (w != nullptr && w->running()) out[name] = w->pid();
  }
  return out;
}

void Soak::CheckProcesses() {
  ++report_.process_scans;
  const std::map<std::string, pid_t> daemons = WorkerPids();
  std::map<std::string, const TrackedJob*> by_id;
  for (const TrackedJob& j : jobs_) by_id[j.id] = &j;
  std::map<std::string, absl::Time> seen;
  const absl::Time now = absl::Now();
  for (const RankProcess& r : ScanRanks(cluster_->dir())) {
    const auto daemon = daemons.find(r.worker);
    const auto job = by_id.find(r.job_id);
    std::string rule;
    absl::Duration grace;
    if (daemon == daemons.end() || daemon->second != r.ppid) {
      rule = "its parent is no worker daemon of the soak";
      grace = kOrphanGrace;
    } else if (job == by_id.end() || job->second->ended) {
      rule = "its job ended";
      grace = kEndedGrace;
    } else if (r.attempt < job->second->last.attempt()) {
      rule = absl::StrCat("its job is at attempt ", job->second->last.attempt());
      grace = kOldAttemptGrace;
    } else {
      continue;
    }
    const std::string key = absl::StrCat(r.pid, ":", rule);
    const auto first = suspects_.find(key);
    const absl::Time since = first == suspects_.end() ? now : first->second;
    seen[key] = since;
    if (now - since > grace && first != suspects_.end() && since != absl::InfinitePast()) {
      Violation(absl::StrCat("orphan: rank ", r.rank, " of ", r.job_id, " attempt ", r.attempt,
                             " (pid ", r.pid, " on ", r.worker, ") still runs ",
                             absl::FormatDuration(now - since), " after ", rule));
      seen[key] = absl::InfinitePast();  // reported once
    }
  }
  suspects_ = std::move(seen);
}

void Soak::SampleCoordinatorMemory() {
  testutil::Subprocess* c = cluster_->coordinator();
  if (c == nullptr || !c->running()) return;
  const std::optional<ResidentMemory> parts = ReadResidentMemory(c->pid());
  if (!parts.has_value()) return;
  const std::optional<int64_t> rss = parts->total;
  rss_last_ = rss;
  parts_last_ = *parts;
  if (rss_baseline_.has_value()) rss_samples_.push_back({absl::Now(), *rss});
  if (absl::Now() - rss_noted_ >= absl::Minutes(1)) {
    rss_noted_ = absl::Now();
    Note(absl::StrFormat("coordinator RSS %.2f MiB (anon %.2f, file %.2f)", *rss / 1048576.0,
                         parts->anon / 1048576.0, parts->file / 1048576.0));
  }
  // After warm-up: the run's own (rss_warmup), and the coordinator's state at its retention
  // bound (kKeepEndedJobs ended jobs: as many are deleted as end from then on).
  int ended = 0;
  for (const TrackedJob& j : jobs_) ended += j.ended;
  if (!rss_baseline_.has_value() && absl::Now() - coordinator_started_ >= config_.rss_warmup &&
      ended >= kKeepEndedJobs) {
    rss_baseline_ = rss;
    parts_baseline_ = *parts;
    rss_baseline_at_ = absl::Now();
    rss_samples_ = {{rss_baseline_at_, *rss}};
    if (!rss_first_baseline_.has_value()) {
      rss_first_baseline_ = rss;
      report_.coordinator_rss_baseline_mib = *rss / 1048576.0;
    }
    Note(absl::StrFormat("coordinator RSS baseline %.1f MiB (anon %.2f, file %.2f)",
                         *rss / 1048576.0, parts->anon / 1048576.0, parts->file / 1048576.0));
  }
}

// The coordinator's run ends (a fault, or the end): its growth since its own baseline, as the
// level (median) of its last kLevelWindow of samples against that of its first after the
// baseline (rss_level.h: single samples measure the steady-state swing), judged when the run
// went on for at least the warm-up after the baseline (a shorter span says little).
void Soak::EndCoordinatorRun() {
  SampleCoordinatorMemory();
  if (rss_last_.has_value()) report_.coordinator_rss_run_end_mib.push_back(*rss_last_ / 1048576.0);
  if (rss_baseline_.has_value() && rss_last_.has_value()) {
    const double single = static_cast<double>(*rss_last_) / *rss_baseline_ - 1;
    const std::optional<double> level = LevelGrowth(rss_samples_, kLevelWindow);
    const absl::Duration span = absl::Now() - rss_baseline_at_;
    report_.coordinator_rss_final_mib = *rss_last_ / 1048576.0;
    const bool judged = span >= config_.rss_warmup && level.has_value();
    Note(absl::StrFormat(
        "coordinator RSS %.1f MiB at the end of its run, %+.2f%% over the %s since its baseline "
        "(anon %+.2f MiB, file %+.2f MiB); level of the last %s against the first: %s%s",
        *rss_last_ / 1048576.0, 100 * single,
        absl::FormatDuration(absl::Trunc(span, absl::Seconds(1))),
        (parts_last_.anon - parts_baseline_.anon) / 1048576.0,
        (parts_last_.file - parts_baseline_.file) / 1048576.0, absl::FormatDuration(kLevelWindow),
        level.has_value() ? absl::StrFormat("%+.2f%%", 100 * *level) : "-",
        judged ? "" : " (too short to judge)"));
    if (judged) {
      ++report_.coordinator_runs_judged;
      report_.coordinator_rss_max_growth = std::max(report_.coordinator_rss_max_growth, *level);
      if (*level >= 0.05) {
        Violation(absl::StrFormat(
            "coordinator RSS level grew %.2f%% after warm-up (baseline sample %.1f MiB, last "
            "%.1f MiB)",
            100 * *level, *rss_baseline_ / 1048576.0, *rss_last_ / 1048576.0));
      }
    }
  }
  rss_baseline_.reset();
  rss_last_.reset();
  rss_samples_.clear();
}

bool Soak::CoordinatorAnswers() {
  return cluster_->Mtctl({"workers"}, absl::Seconds(10)).exit_code == 0;
}

}  // namespace mt::chaos

namespace mt::chaos {

std::optional<CatalogComparison> Soak::CompareCatalog(const TrackedJob& job) {
  const testutil::CommandResult r =
      cluster_->Mtctl({"-o", "json", "checkpoints", "list", job.id}, absl::Seconds(20));
  if (r.exit_code != 0) return std::nullopt;
  // Read the disk after the catalog: a save that lands in between is on disk but not yet in
  // the catalog, which the caller's repeated checks allow for.
  mt::v1::ListCheckpointsResponse list;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(r.out, &list, options).ok()) {
    Violation(absl::StrCat("mtctl checkpoints list ", job.id, " printed no JSON: ", r.out));
    return std::nullopt;
  }
  ++report_.catalog_checks;
  return CompareCatalogWithDisk({list.checkpoints().begin(), list.checkpoints().end()},
                                checkpoint::ListCheckpointSteps(job.save_dir));
}

void Soak::CheckCatalogs(bool final_only) {
  const absl::Time now = absl::Now();
  if (!final_only) last_catalog_check_ = now;
  for (TrackedJob& job : jobs_) {
    if (job.final_checked || job.ended != final_only) continue;
    if (final_only && now - job.ended_at < absl::Seconds(2)) continue;
    std::optional<CatalogComparison> c = CompareCatalog(job);
    if (!c.has_value()) continue;
    const std::string what = c->mismatches.empty() ? "" : c->mismatches.front();
    if (!final_only) {
      job.catalog_misses = what.empty() ? 0 : job.catalog_misses + 1;
      if (job.catalog_misses == kCatalogMisses) {
        Violation(absl::StrCat("catalog of ", job.id, " disagrees with ", job.save_dir, " for ",
                               absl::FormatDuration(kCatalogEvery * (kCatalogMisses - 1)), ": ",
                               what));
      }
      continue;
    }
    if (!what.empty() && now - job.ended_at < absl::Seconds(30)) continue;  // reports trail
    job.final_checked = true;
    report_.writing_entries_left += c->writing;
    if (!what.empty()) {
      Violation(absl::StrCat("catalog of ", job.id, " (ended) disagrees with ", job.save_dir, ": ",
                             what));
      continue;
    }
    // Checked: its files go, so that the checkpoint disk holds only the jobs in flight.
    std::error_code ignored;
    std::filesystem::remove_all(job.save_dir, ignored);
  }
}

// Every job in flight may lose its attempt now without failing for good (soak.h).
bool Soak::AllSafe() {
  const std::vector<RankProcess> ranks = ScanRanks(cluster_->dir());
  for (TrackedJob* job : InFlight()) {
    const mt::v1::Job& j = job->last;
    if (j.attempt() == 0 &&
        (j.state() == mt::v1::JOB_STATE_PENDING || j.state() == mt::v1::JOB_STATE_SCHEDULED)) {
      continue;  // not started: a first failure would restart it from scratch
    }
    if (j.state() != mt::v1::JOB_STATE_RUNNING) return false;
    if (checkpoint::ReadLatest(job->save_dir).value_or(0) <= j.resume_step()) return false;
    int live = 0;
    for (const RankProcess& r : ranks) {
      if (r.job_id == job->id && r.attempt == j.attempt() && r.state != 'T' && r.state != 'Z') {
        ++live;
      }
    }
    if (live != j.layout().world_size()) return false;
  }
  return true;
}

}  // namespace mt::chaos
