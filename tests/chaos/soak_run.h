// The soak's driver (soak.h): one object per run, driven by one thread. Its loop is a tick
// (poll the jobs in flight, scan the processes, sample the coordinator's memory, compare the
// catalog with the disk now and then, keep jobs in flight), and every wait of a fault ticks, so
// the invariants are checked during the faults too. Internal to tests/chaos.
#ifndef MT_TESTS_CHAOS_SOAK_RUN_H_
#define MT_TESTS_CHAOS_SOAK_RUN_H_

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "mt/v1/job.pb.h"
#include "tests/chaos/catalog_check.h"
#include "tests/chaos/checkpoint_disk.h"
#include "tests/chaos/fault_plan.h"
#include "tests/chaos/processes.h"
#include "tests/chaos/rss_level.h"
#include "tests/chaos/soak.h"
#include "tests/testutil/rig_cluster.h"

namespace mt::chaos {

// The coordinator keeps this many ended jobs (--keep_ended_jobs): its state is bounded.
inline constexpr int kKeepEndedJobs = 6;

// A job spec the soak trains, and the losses of its undisturbed run.
struct Variant {
  std::string name;
  int dp = 2;
  int global_batch_size = 8;
  int eval_interval = 10;
  double loss = 0, validation_loss = 0;  // of the reference run
};

struct TrackedJob {
  std::string id;
  int variant = 0;
  std::string save_dir;
  bool reference = false;
  mt::v1::Job last;  // as last described
  bool ended = false;
  absl::Time ended_at;
  bool final_checked = false;
  int catalog_misses = 0;  // consecutive periodic checks that found a mismatch
};

// A fault's victims, to time their recovery: job id -> its attempt when the fault hit.
struct Recovery {
  absl::Time at;
  std::map<std::string, int> attempts;
};

class Soak {
 public:
  explicit Soak(SoakConfig config) : config_(std::move(config)), plan_(config_.seed) {}
  absl::StatusOr<SoakReport> Run();

 private:
  // Set-up, phases and end (soak_run.cc).
  absl::Status SetUp();
  absl::Status StartWorkers();
  void RunReferences();
  void RunFaults();
  void Drain();
  void StopEverything();
  std::string SubmitJob(int variant, bool reference);
  std::string JobYaml(const Variant& v, const std::string& name, const std::string& save) const;

  // The monitor (soak_monitor.cc).
  void Tick();
  // Ticks until `done` or `timeout`; returns done().
  bool TickUntil(const std::function<bool()>& done, absl::Duration timeout);
  void Hold(absl::Duration d) {
    TickUntil([] { return false; }, d);
  }
  void PollJobs();
  void OnJobEnded(TrackedJob& job);
  void CheckProcesses();
  void SampleCoordinatorMemory();
  void EndCoordinatorRun();  // before the soak stops the coordinator
  void CheckCatalogs(bool final_only);
  // The job's catalog against its save_dir; nullopt when the coordinator does not answer.
  std::optional<CatalogComparison> CompareCatalog(const TrackedJob& job);
  void KeepJobsInFlight();
  bool CoordinatorAnswers();
  std::vector<TrackedJob*> InFlight();
  bool AllSafe();
  void Violation(const std::string& what);
  void Note(const std::string& what);
  bool Interrupted() const { return config_.interrupted != nullptr && config_.interrupted->load(); }
  double Elapsed() const { return absl::ToDoubleSeconds(absl::Now() - start_); }
  std::map<std::string, pid_t> WorkerPids();

  // The faults (soak_faults.cc).
  void Inject(FaultKind kind);
  std::vector<RankProcess> Victims();
  Recovery Snapshot();
  void KillRank(const RankProcess& r);
  void KillWorker(const RankProcess& r);
  void RestartCoordinator();
  void StopRank(const RankProcess& r);
  void FillDisk();
  void CutNetwork(const RankProcess& r);
  void TrackRecoveries();

  SoakConfig config_;
  FaultPlan plan_;
  SoakReport report_;
  absl::Time start_ = absl::Now();
  std::unique_ptr<testutil::RigCluster> cluster_;
  std::unique_ptr<CheckpointDisk> disk_;
  std::string data_;
  std::vector<Variant> variants_;
  std::deque<TrackedJob> jobs_;  // a deque: submitting keeps references to the others valid
  std::map<std::string, std::pair<int, int>> worker_slots_;  // name -> (node, index)
  bool submitting_ = false;  // keep one job of each variant in flight
  int job_serial_ = 0;
  absl::Time last_catalog_check_ = absl::InfinitePast();
  // The coordinator's current run, for its memory.
  absl::Time coordinator_started_;
  std::optional<int64_t> rss_baseline_, rss_last_, rss_first_baseline_;
  // Its anonymous and file-backed parts at the baseline and last sample (for the notes).
  ResidentMemory parts_baseline_, parts_last_;
  absl::Time rss_baseline_at_;
  std::vector<MemorySample> rss_samples_;        // of the current run, from its baseline on
  absl::Time rss_noted_ = absl::InfinitePast();  // the last RSS line on stderr (one a minute)
  // When a process was first seen breaking a rule ("pid:rule" -> time), for its grace.
  std::map<std::string, absl::Time> suspects_;
  std::vector<Recovery> recoveries_;
};

}  // namespace mt::chaos

#endif  // MT_TESTS_CHAOS_SOAK_RUN_H_
