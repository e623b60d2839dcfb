// The soak's faults (fault_plan.h), each injected while the monitor ticks on.
#include <signal.h>

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/chaos/soak_run.h"

namespace mt::chaos {
namespace {

std::string Describe(const RankProcess& r) {
  return absl::StrCat("rank ", r.rank, " of ", r.job_id, " (pid ", r.pid, " on ", r.worker, ")");
}

}  // namespace

// Running ranks of the current attempts of the RUNNING jobs in flight.
std::vector<RankProcess> Soak::Victims() {
  std::vector<RankProcess> out;
  for (const RankProcess& r : ScanRanks(cluster_->dir())) {
    for (TrackedJob* job : InFlight()) {
      // RUNNING: the hang detector watches RUNNING jobs (a rank stalled while its job is
      // SCHEDULED is left to the collective timeout, README.md).
      if (job->id == r.job_id && !job->reference && r.attempt == job->last.attempt() &&
          job->last.state() == mt::v1::JOB_STATE_RUNNING && r.state != 'T' && r.state != 'Z') {
        out.push_back(r);
      }
    }
  }
  return out;
}

Recovery Soak::Snapshot() {
  Recovery r;
  r.at = absl::Now();
  for (TrackedJob* job : InFlight()) r.attempts[job->id] = job->last.attempt();
  return r;
}

// A victim of a fault trains again: a new attempt RUNNING past the step it resumed from.
void Soak::TrackRecoveries() {
  for (Recovery& r : recoveries_) {
    for (auto it = r.attempts.begin(); it != r.attempts.end();) {
      const TrackedJob* job = nullptr;
      for (const TrackedJob& j : jobs_) job = j.id == it->first ? &j : job;
      const bool again = job != nullptr && job->last.attempt() > it->second &&
                         job->last.state() == mt::v1::JOB_STATE_RUNNING &&
                         job->last.progress().step() > job->last.resume_step();
      if (again) {
        report_.recovery_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - r.at));
      }
      it = again || job == nullptr || job->ended ? r.attempts.erase(it) : std::next(it);
    }
  }
  recoveries_.erase(std::remove_if(recoveries_.begin(), recoveries_.end(),
                                   [](const Recovery& r) { return r.attempts.empty(); }),
                    recoveries_.end());
}

void Soak::Inject(FaultKind kind) {
  recoveries_.push_back(Snapshot());
  const std::vector<RankProcess> victims = Victims();
  const RankProcess victim =
      victims.empty() ? RankProcess{} : victims[plan_.Uniform(0, victims.size() - 1)];
  switch (kind) {
    case FaultKind::kKillRank:
      return KillRank(victim);
    case FaultKind::kKillWorker:
      return KillWorker(victim);
    case FaultKind::kRestartCoordinator:
      return RestartCoordinator();
    case FaultKind::kStopRank:
      return StopRank(victim);
    case FaultKind::kFillDisk:
      return FillDisk();
    case FaultKind::kCutNetwork:
      return CutNetwork(victim);
  }
}

void Soak::KillRank(const RankProcess& r) {
  ::kill(r.pid, SIGKILL);
  report_.fault_log.push_back(
      absl::StrFormat("t=%.1fs kill_rank: kill -9 %s", Elapsed(), Describe(r)));
  Note(report_.fault_log.back());
}

void Soak::KillWorker(const RankProcess& r) {
  testutil::Subprocess* w = cluster_->worker(r.worker);
  w->Signal(SIGKILL);
  (void)w->Wait(absl::Seconds(10));
  const absl::Duration down = plan_.UniformDuration(absl::Seconds(1), absl::Seconds(4));
  report_.fault_log.push_back(
      absl::StrFormat("t=%.1fs kill_worker: kill -9 %s (running %s), "
                      "started again after %s",
                      Elapsed(), r.worker, Describe(r), absl::FormatDuration(down)));
  Note(report_.fault_log.back());
  Hold(down);
  const auto [node, index] = worker_slots_.at(r.worker);
  if (absl::Status s = cluster_->StartWorker(node, index); !s.ok()) {
    Violation(absl::StrCat("starting ", r.worker, " again: ", s.message()));
  }
}

void Soak::RestartCoordinator() {
  const bool kill = plan_.Coin();
  const absl::Duration down = plan_.UniformDuration(absl::Seconds(1), absl::Seconds(8));
  report_.fault_log.push_back(absl::StrFormat("t=%.1fs restart_coordinator: %s, down for %s",
                                              Elapsed(), kill ? "kill -9" : "SIGTERM",
                                              absl::FormatDuration(down)));
  Note(report_.fault_log.back());
  EndCoordinatorRun();
  testutil::Subprocess* c = cluster_->coordinator();
  c->Signal(kill ? SIGKILL : SIGTERM);
  if (!c->Wait(absl::Seconds(30)).ok()) {
    Violation("the coordinator still ran 30 s after SIGTERM");
    c->Signal(SIGKILL);
    (void)c->Wait(absl::Seconds(10));
  }
  Hold(down);
  if (absl::Status s = cluster_->StartCoordinator(); !s.ok()) {
    Violation(absl::StrCat("starting the coordinator again: ", s.message()));
    return;
  }
  coordinator_started_ = absl::Now();
  if (!TickUntil([&] { return CoordinatorAnswers(); }, absl::Seconds(30))) {
    Violation("the coordinator did not answer within 30 s of its restart" +
              cluster_->Log("coordinator"));
  }
}

void Soak::StopRank(const RankProcess& r) {
  const bool resume = plan_.Coin();
  const absl::Time at = absl::Now();
  ::kill(r.pid, SIGSTOP);
  if (resume) {
    const absl::Duration pause =
        plan_.UniformDuration(absl::Seconds(1), absl::Seconds(config_.hang_floor_seconds) / 2);
    report_.fault_log.push_back(absl::StrFormat("t=%.1fs stop_rank: SIGSTOP %s, SIGCONT after %s",
                                                Elapsed(), Describe(r),
                                                absl::FormatDuration(pause)));
    Note(report_.fault_log.back());
    Hold(pause);
    ::kill(r.pid, SIGCONT);
    return;
  }
  report_.fault_log.push_back(absl::StrFormat(
      "t=%.1fs stop_rank: SIGSTOP %s, left to the hang detector", Elapsed(), Describe(r)));
  Note(report_.fault_log.back());
  const int attempt = recoveries_.back().attempts[r.job_id];
  const auto restarting = [&] {
    for (const TrackedJob& j : jobs_) {
      if (j.id == r.job_id)
        return j.ended || j.last.attempt() > attempt ||
               j.last.state() == mt::v1::JOB_STATE_RESTARTING;
    }
    return true;
  };
  const absl::Duration limit = absl::Seconds(config_.hang_floor_seconds + 30);
  if (TickUntil(restarting, limit)) {
    report_.hang_detection_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - at));
  } else {
    Violation(absl::StrCat("the hang of ", Describe(r), " was not detected within ",
                           absl::FormatDuration(limit)));
  }
  // The detector stops the job's ranks (SIGTERM, then SIGKILL after the grace): gone soon.
  if (!TickUntil([&] { return ::kill(r.pid, 0) != 0; }, absl::Seconds(30))) {
    Violation(absl::StrCat(Describe(r), " still exists 30 s after its hang was handled"));
    ::kill(r.pid, SIGKILL);
  }
}

void Soak::FillDisk() {
  // Every job's attempt now: one submitted while the disk is full counts from attempt 0.
  std::map<std::string, int> before;
  for (const TrackedJob& j : jobs_) {
    if (!j.ended) before[j.id] = j.last.attempt();
  }
  if (absl::Status s = disk_->Fill(64 << 10); !s.ok()) {
    Violation(absl::StrCat("filling the checkpoint disk: ", s.message()));
    return;
  }
  // Full until a save fails (a job restarts), at most a few save intervals. Held longer, a
  // job restarted from its last checkpoint fails its next save too, and the restart policy
  // rightly gives up on it (no new checkpoint since its restart): not what the soak checks.
  const absl::Time at = absl::Now();
  const bool failed = TickUntil(
      [&] {
        for (const TrackedJob& j : jobs_) {
          if (j.reference) continue;
          const auto it = before.find(j.id);
          const int was = it == before.end() ? 0 : it->second;
          if (j.last.attempt() > was || j.last.state() == mt::v1::JOB_STATE_RESTARTING ||
              j.last.state() == mt::v1::JOB_STATE_FAILED) {
            return true;
          }
        }
        return false;
      },
      absl::Seconds(60));
  if (absl::Status s = disk_->Free(); !s.ok()) Violation(absl::StrCat("freeing: ", s.message()));
  report_.fault_log.push_back(
      absl::StrFormat("t=%.1fs fill_disk: the checkpoint tmpfs full for %s, %s", Elapsed(),
                      absl::FormatDuration(absl::Trunc(absl::Now() - at, absl::Milliseconds(100))),
                      failed ? "until a save failed" : "no save failed"));
  Note(report_.fault_log.back());
}

void Soak::CutNetwork(const RankProcess& r) {
  const int node = worker_slots_.at(r.worker).first;
  const absl::Duration cut = plan_.UniformDuration(absl::Seconds(2), absl::Seconds(8));
  report_.fault_log.push_back(absl::StrFormat(
      "t=%.1fs cut_network: %s (running %s) off the network for %s", Elapsed(),
      testutil::RigCluster::NodeName(node), Describe(r), absl::FormatDuration(cut)));
  Note(report_.fault_log.back());
  if (absl::Status s =
          cluster_->rig().SetLink(testutil::RigCluster::kFirstWorkerNode + node, false);
      !s.ok()) {
    Violation(absl::StrCat("cutting the link: ", s.message()));
    return;
  }
  Hold(cut);
  if (absl::Status s = cluster_->rig().SetLink(testutil::RigCluster::kFirstWorkerNode + node, true);
      !s.ok()) {
    Violation(absl::StrCat("restoring the link: ", s.message()));
  }
}

}  // namespace mt::chaos
