// The chaos soak (issue 19; tests/chaos/README.md): a real cluster over network namespaces
// (tests/testutil/rig_cluster.h: coordinator, mtctl and CPU worker daemons on nodes of their
// own, TLS, a token) trains tiny GPT jobs back to back for `duration` while faults from a
// seeded plan (fault_plan.h) hit it one at a time, and checks its invariants all along:
//   1. every job ends SUCCEEDED with exactly (bit for bit: fp32 on CPU is deterministic, and a
//      resume is exact) the final training and validation loss of an undisturbed run of its
//      spec (the references, trained first with no fault);
//   2. no orphan process: every rank's parent is a live worker daemon of the soak, no rank of
//      an ended job or of an older attempt lingers, and nothing of the soak runs at the end;
//   3. the checkpoint catalog agrees with the checkpoint disk (catalog_check.h);
//   4. the coordinator's resident memory grows by less than 5% after its warm-up (each run of it
//      from rss_warmup after its start, and once its state is at its retention bound (the
//      newest kKeepEndedJobs ended jobs are kept), to its end, when that span lasts rss_warmup
//      or more), as the level (median) of its last 30 s of samples against its first 30 s
//      (rss_level.h: a single sample measures where the steady-state swing stood).
// A fault is injected only when every job in flight has a checkpoint newer than the one its
// attempt resumed from (restart_policy.h, rule 4: a job failing again with no new checkpoint
// fails on purpose; a fair soak does not hit it there). Not thread-safe; one soak at a time.
#ifndef MT_TESTS_CHAOS_SOAK_H_
#define MT_TESTS_CHAOS_SOAK_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mt::chaos {

struct SoakConfig {
  std::string bin_dir;                         // mt-coordinator, mt-worker, mt-train, mtctl
  absl::Duration duration = absl::Minutes(2);  // of the fault phase
  uint64_t seed = 1;
  int worker_nodes = 4;    // 2 CPU workers each
  int train_iters = 60;    // per job
  int save_interval = 10;  // evaluation every save_interval (the dp=2 spec: the same steps)
  int hang_floor_seconds = 10;
  absl::Duration fault_gap_min = absl::Seconds(2);  // pause between faults, once jobs are safe
  absl::Duration fault_gap_max = absl::Seconds(6);
  // Of each coordinator run, before its baseline; a run is judged when it goes on for at least
  // as long again after it.
  absl::Duration rss_warmup = absl::Seconds(60);
  absl::Duration drain_timeout = absl::Minutes(5);
  // Set (by a signal handler's thread) to stop early: the soak then drains for 10 s at most,
  // reports, and removes its processes, namespaces and mount. May be null.
  const std::atomic<bool>* interrupted = nullptr;

  absl::Status Validate() const;
};

struct SoakReport {
  uint64_t seed = 0;
  double fault_phase_seconds = 0;
  double total_seconds = 0;
  std::map<std::string, int> faults;  // by kind name
  int jobs_submitted = 0;
  int jobs_succeeded_exact = 0;  // SUCCEEDED with the reference's losses
  int restarts = 0;              // attempts beyond the first, over every job
  int catalog_checks = 0;
  int process_scans = 0;
  int writing_entries_left = 0;                // WRITING catalog entries of ended jobs (dead saves)
  std::vector<double> hang_detection_seconds;  // SIGSTOP -> the job RESTARTING
  std::vector<double> recovery_seconds;        // fault -> the job training again (new attempt)
  double coordinator_rss_baseline_mib = 0;     // first run, after its warm-up
  double coordinator_rss_final_mib = 0;        // last sample before the soak stops it
  double coordinator_rss_max_growth = 0;       // the largest growth of a judged run (fraction)
  int coordinator_runs_judged = 0;             // runs long enough after their baseline
  std::vector<double> coordinator_rss_run_end_mib;  // RSS at the end of each run
  std::vector<std::string> fault_log;               // "t=12.3s kill_rank: rank 1 of j-3 ..."
  std::vector<std::string> violations;              // empty: every invariant held

  std::string Text() const;
  std::string Json() const;
};

// Runs the soak. FAILED_PRECONDITION when it cannot run here (no root, no network namespaces,
// no tmpfs mount): the caller skips; other errors are failures of the set-up.
absl::StatusOr<SoakReport> RunSoak(const SoakConfig& config);

}  // namespace mt::chaos

#endif  // MT_TESTS_CHAOS_SOAK_H_
