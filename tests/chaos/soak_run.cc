#include "tests/chaos/soak_run.h"

#include <signal.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/testutil/cluster.h"
#include "tests/testutil/job_fixture.h"

namespace mt::chaos {

absl::Status SoakConfig::Validate() const {
  if (bin_dir.empty()) return absl::InvalidArgumentError("--bin_dir: empty; name the build's bin/");
  if (duration <= absl::ZeroDuration() || duration > absl::Hours(48)) {
    return absl::InvalidArgumentError("--duration: must be in (0, 48h], e.g. 90s or 1h");
  }
  if (worker_nodes < 2 || worker_nodes > 8) {
    return absl::InvalidArgumentError("--worker_nodes: must be 2..8 (2 workers each)");
  }
  if (save_interval < 2 || train_iters < 2 * save_interval || train_iters > 100000) {
    return absl::InvalidArgumentError(
        "--train_iters/--save_interval: need save_interval >= 2 and train_iters >= 2 x "
        "save_interval (<= 100000), so that a job saves before it ends");
  }
  if (hang_floor_seconds < 2 || hang_floor_seconds > 50) {
    return absl::InvalidArgumentError(
        "--hang_floor_seconds: must be 2..50 (below the 1-minute collective timeout)");
  }
  if (fault_gap_min < absl::ZeroDuration() || fault_gap_max < fault_gap_min) {
    return absl::InvalidArgumentError("--fault_gap_min/--fault_gap_max: need 0 <= min <= max");
  }
  return absl::OkStatus();
}

absl::StatusOr<SoakReport> Soak::Run() {
  report_.seed = config_.seed;
  std::fprintf(stderr, "[chaos] seed %llu, fault phase %s\n",
               static_cast<unsigned long long>(config_.seed),
               absl::FormatDuration(config_.duration).c_str());
  if (absl::Status s = SetUp(); !s.ok()) return s;
  RunReferences();
  if (report_.violations.empty() && !Interrupted()) {
    const absl::Time faults_from = absl::Now();
    RunFaults();
    report_.fault_phase_seconds = absl::ToDoubleSeconds(absl::Now() - faults_from);
  }
  Drain();
  StopEverything();
  report_.total_seconds = Elapsed();
  return report_;
}

absl::Status Soak::SetUp() {
  testutil::RigClusterOptions options;
  options.worker_nodes = config_.worker_nodes;
  options.prefix = "mtchaos";
  // The newest ended jobs are kept (retention, as a long-lived service runs it): the state a
  // coordinator holds stays bounded, so its memory can be judged.
  options.coordinator_flags = {"--heartbeat_interval=500ms", "--lost_after=3s",
                               absl::StrCat("--keep_ended_jobs=", kKeepEndedJobs)};
  // No malloc tuning here: mt-coordinator fixes glibc's mmap threshold itself (its main.cc), so
  // the RSS judged is the product's own.
  absl::StatusOr<std::unique_ptr<testutil::RigCluster>> cluster =
      testutil::RigCluster::Create(config_.bin_dir, options);
  if (!cluster.ok()) return cluster.status();
  cluster_ = *std::move(cluster);
  std::fprintf(stderr, "[chaos] cluster in %s\n", cluster_->dir().c_str());
  // Room for the checkpoints of the jobs in flight (about 20 MB each, two kept per job plus
  // the one being written): 256 MiB.
  absl::StatusOr<std::unique_ptr<CheckpointDisk>> disk =
      CheckpointDisk::Mount(cluster_->dir() + "/disk", 256 << 20);
  if (!disk.ok()) return disk.status();
  disk_ = *std::move(disk);
  data_ = testutil::WriteRepetitiveDataset(cluster_->dir(), 64, 200);
  if (data_.empty()) return absl::InternalError("cannot write the dataset");
  // dp=2 evaluates at every save (issue 19's exact validation resume); dp=3 at other steps.
  variants_ = {{"dp2", 2, 8, config_.save_interval},
               {"dp3", 3, 12, config_.save_interval + config_.save_interval / 2}};
  if (absl::Status s = cluster_->StartCoordinator(); !s.ok()) return s;
  coordinator_started_ = absl::Now();
  return StartWorkers();
}

absl::Status Soak::StartWorkers() {
  for (int n = 0; n < config_.worker_nodes; ++n) {
    for (int w = 0; w < 2; ++w) {
      worker_slots_[testutil::RigCluster::WorkerName(n, w)] = {n, w};
      if (absl::Status s = cluster_->StartWorker(n, w); !s.ok()) return s;
    }
  }
  const int want = 2 * config_.worker_nodes;
  if (!testutil::WaitFor([&] { return cluster_->IdleWorkers() == want; }, absl::Seconds(60))) {
    return absl::DeadlineExceededError(
        absl::StrCat(want, " workers did not register within 60 s", cluster_->Log("coordinator")));
  }
  return absl::OkStatus();
}

std::string Soak::JobYaml(const Variant& v, const std::string& name,
                          const std::string& save) const {
  testutil::TinyJob job(name, data_, config_.train_iters);
  job.dp = absl::StrCat(v.dp);
  job.global_batch_size = v.global_batch_size;
  job.dropout = "0.1";  // the RNG state must resume exactly too
  job.log_interval = 1;
  job.tokenizer_dir = cluster_->dir();  // under the coordinator's --allowed-root
  job.evaluation = absl::StrCat("{eval_interval: ", v.eval_interval, ", eval_iters: 2}");
  job.sections = {
      absl::StrCat("checkpoint: {save_dir: ", save, ", save_interval: ", config_.save_interval,
                   ", retention: {keep_last: 2}}"),
      absl::StrCat(
          "restart: {max_restarts: 100, hang_timeout_floor_seconds: ", config_.hang_floor_seconds,
          ", save_load_timeout_seconds: ", 3 * config_.hang_floor_seconds,
          ", distributed_timeout_minutes: 1}")};
  return job.Yaml();
}

std::string Soak::SubmitJob(int variant, bool reference) {
  const std::string name =
      absl::StrCat(reference ? "ref-" : "chaos-", variants_[variant].name, "-", ++job_serial_);
  const std::string save = disk_->path() + "/" + name;
  absl::StatusOr<std::string> id = absl::UnavailableError("not submitted");
  // The coordinator may be restarting (a fault): try for a while. No tick here (a tick submits).
  testutil::WaitFor(
      [&] {
        id = cluster_->Submit(JobYaml(variants_[variant], name, save), name + ".yaml");
        return !absl::IsUnavailable(id.status());
      },
      absl::Seconds(60));
  if (!id.ok()) {
    Violation(absl::StrCat("submitting ", name, ": ", id.status().message()));
    return "";
  }
  TrackedJob job;
  job.id = *id;
  job.variant = variant;
  job.save_dir = save;
  job.reference = reference;
  jobs_.push_back(job);
  ++report_.jobs_submitted;
  Note(absl::StrCat("submitted ", name, " as ", *id));
  return *id;
}

void Soak::RunReferences() {
  for (size_t v = 0; v < variants_.size(); ++v) SubmitJob(static_cast<int>(v), true);
  const bool done = TickUntil(
      [&] {
        for (const TrackedJob& j : jobs_) {
          if (!j.ended) return false;
        }
        return true;
      },
      absl::Minutes(10));
  if (!done) Violation("the reference runs did not end within 10 minutes");
}

void Soak::RunFaults() {
  submitting_ = true;
  const absl::Time end = absl::Now() + config_.duration;
  while (absl::Now() < end && !Interrupted()) {
    Hold(plan_.UniformDuration(config_.fault_gap_min, config_.fault_gap_max));
    const FaultKind kind = plan_.NextKind();
    // Fair: every job in flight can lose its attempt (a newer checkpoint than its resume).
    const bool needs_victim =
        kind != FaultKind::kRestartCoordinator && kind != FaultKind::kFillDisk;
    const absl::Time waiting = absl::Now();
    const bool ready = TickUntil([&] { return AllSafe() && (!needs_victim || !Victims().empty()); },
                                 absl::Minutes(4));
    if (Interrupted()) break;
    if (!ready) {
      Violation(absl::StrCat("the jobs in flight were not training with a new checkpoint ",
                             absl::FormatDuration(absl::Now() - waiting), " after the last fault"));
      break;
    }
    if (absl::Now() >= end || Interrupted()) break;
    Inject(kind);
    ++report_.faults[FaultName(kind)];
  }
  submitting_ = false;
}

void Soak::Drain() {
  Note("draining: no more faults or submissions");
  if (Interrupted()) Violation("interrupted by a signal: the soak did not run to its end");
  const bool drained = TickUntil(
      [&] {
        for (const TrackedJob& j : jobs_) {
          if (!j.final_checked) return false;
        }
        return true;
      },
      Interrupted() ? absl::Seconds(10) : config_.drain_timeout);
  if (!drained) {
    std::vector<std::string> open;
    for (const TrackedJob& j : jobs_) {
      if (!j.final_checked) {
        open.push_back(absl::StrCat(j.id, " ", mt::v1::JobState_Name(j.last.state()), " (",
                                    j.last.reason(), ")"));
      }
    }
    Violation(absl::StrCat("jobs not ended and checked ",
                           absl::FormatDuration(config_.drain_timeout),
                           " after the faults stopped: ", absl::StrJoin(open, "; ")));
  }
}

}  // namespace mt::chaos

namespace mt::chaos {

// Stops the daemons as an operator would (SIGTERM) and checks that nothing of the soak is left.
void Soak::StopEverything() {
  EndCoordinatorRun();
  for (const auto& [name, slot] : worker_slots_) {
    if (testutil::Subprocess* w = cluster_->worker(name); w != nullptr && w->running()) {
      w->Signal(SIGTERM);
    }
  }
  for (const auto& [name, slot] : worker_slots_) {
    testutil::Subprocess* w = cluster_->worker(name);
    if (w == nullptr || !w->running()) continue;
    if (!w->Wait(absl::Seconds(10)).ok()) {
      Violation(absl::StrCat(name, " still ran 10 s after SIGTERM"));
      w->Signal(SIGKILL);
      (void)w->Wait(absl::Seconds(10));
    }
  }
  for (const RankProcess& r : ScanRanks(cluster_->dir())) {
    Violation(absl::StrCat("orphan: rank ", r.rank, " of ", r.job_id, " (pid ", r.pid,
                           ") outlived its worker daemon ", r.worker));
    ::kill(r.pid, SIGKILL);
  }
  if (testutil::Subprocess* c = cluster_->coordinator(); c != nullptr && c->running()) {
    c->Signal(SIGTERM);
    if (!c->Wait(absl::Seconds(30)).ok()) Violation("the coordinator still ran 30 s after SIGTERM");
  }
  for (const auto& [pid, cmdline] : ProcessesMentioning(cluster_->dir())) {
    Violation(absl::StrCat("left running at the end: pid ", pid, ": ", cmdline));
    ::kill(pid, SIGKILL);
  }
  disk_.reset();
  const std::string dir = cluster_->dir();
  cluster_.reset();  // removes the namespaces
  if (report_.violations.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  } else {
    std::fprintf(stderr, "[chaos] logs kept in %s\n", dir.c_str());
  }
}

}  // namespace mt::chaos
