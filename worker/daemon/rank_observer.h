// What the daemon tells an observer about its ranks (its Prometheus metrics, worker_metrics.h):
// a narrow interface so that the agent knows nothing of Prometheus. Calls come from the
// agent's threads, concurrently: implementations are thread-safe and quick (no blocking I/O).
#ifndef MT_WORKER_DAEMON_RANK_OBSERVER_H_
#define MT_WORKER_DAEMON_RANK_OBSERVER_H_

#include "mt/v1/worker_service.pb.h"

namespace mt::worker {

class RankObserver {
 public:
  virtual ~RankObserver() = default;
  // A rank's trainer process started.
  virtual void OnRankStarted(const mt::v1::Assignment& assignment) = 0;
  // A report from a running rank (identity fields already set by the daemon).
  virtual void OnRankReport(const mt::v1::RankReport& report) = 0;
  // A rank ended (or could not start).
  virtual void OnRankExited(const mt::v1::RankExitReport& report) = 0;
  // Called from the daemon's main loop about once per heartbeat.
  virtual void OnTick() = 0;
};

}  // namespace mt::worker

#endif  // MT_WORKER_DAEMON_RANK_OBSERVER_H_
