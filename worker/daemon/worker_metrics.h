// The worker daemon's Prometheus metrics (docs/metrics.md): the daemon's own (busy, ranks
// started and ended) and, per running rank, what its trainer reports through the pipe
// (worker_service.proto RankTelemetry, Progress, CheckpointReport). The trainer serves no
// HTTP itself.
//
// Rank series carry job, rank, tp, pp, dp, node and gpu labels. A rank's series stay for
// `linger` after it ended (so that the last values are scraped) and are then removed: the job
// label is bounded by the jobs running here. Collective and group labels come from fixed sets
// (anything else is "other").
//
// Thread-safe.
#ifndef MT_WORKER_DAEMON_WORKER_METRICS_H_
#define MT_WORKER_DAEMON_WORKER_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "mt/v1/worker_service.pb.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "worker/daemon/rank_observer.h"

namespace mt::worker::metrics {

class WorkerMetrics : public RankObserver {
 public:
  // Registers every family in `registry` (which outlives this). `resources` gives the node
  // and gpu labels; `clock` outlives this.
  WorkerMetrics(prometheus::Registry* registry, const mt::v1::WorkerResources& resources,
                const std::string& version, const Clock* clock,
                absl::Duration linger = absl::Seconds(30));
  ~WorkerMetrics() override;

  void OnRankStarted(const mt::v1::Assignment& assignment) override;
  void OnRankReport(const mt::v1::RankReport& report) override;
  void OnRankExited(const mt::v1::RankExitReport& report) override;
  // Removes the series of ranks that ended more than `linger` ago.
  void OnTick() override;

  // Ranks with series now (running or lingering).
  int ranks_with_series() const;

  // Buckets of the step-time histogram (seconds).
  static const std::vector<double>& StepSecondsBuckets();

 private:
  struct Rank;
  void RemoveLocked(Rank* rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* clock_;
  const absl::Duration linger_;
  const std::string node_;
  const std::string gpu_;

  // Daemon.
  prometheus::Gauge* busy_ = nullptr;
  prometheus::Counter* started_ = nullptr;
  prometheus::Family<prometheus::Counter>* ended_ = nullptr;
  prometheus::Counter* reports_ = nullptr;

  // Per rank.
  prometheus::Family<prometheus::Gauge>* step_;
  prometheus::Family<prometheus::Gauge>* attempt_;
  prometheus::Family<prometheus::Gauge>* loss_;
  prometheus::Family<prometheus::Gauge>* validation_loss_;
  prometheus::Family<prometheus::Gauge>* learning_rate_;
  prometheus::Family<prometheus::Gauge>* grad_norm_;
  prometheus::Family<prometheus::Gauge>* loss_scale_;
  prometheus::Family<prometheus::Counter>* skipped_;
  prometheus::Family<prometheus::Gauge>* tokens_per_second_;
  prometheus::Family<prometheus::Counter>* tokens_;
  prometheus::Family<prometheus::Counter>* samples_;
  prometheus::Family<prometheus::Histogram>* step_seconds_;
  prometheus::Family<prometheus::Gauge>* mfu_;
  prometheus::Family<prometheus::Gauge>* memory_allocated_;
  prometheus::Family<prometheus::Gauge>* memory_reserved_;
  prometheus::Family<prometheus::Gauge>* memory_peak_;
  prometheus::Family<prometheus::Counter>* data_wait_;
  prometheus::Family<prometheus::Counter>* comm_;
  prometheus::Family<prometheus::Histogram>* checkpoint_save_seconds_;
  prometheus::Family<prometheus::Counter>* checkpoint_saved_bytes_;
  prometheus::Family<prometheus::Histogram>* checkpoint_load_seconds_;
  prometheus::Family<prometheus::Counter>* checkpoint_loaded_bytes_;

  mutable absl::Mutex mu_;
  // By "job/attempt/rank".
  std::map<std::string, std::unique_ptr<Rank>> ranks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mt::worker::metrics

#endif  // MT_WORKER_DAEMON_WORKER_METRICS_H_
