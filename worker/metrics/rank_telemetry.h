// The rank side of the worker's metrics: collects every step's figures and hands them to the
// daemon as an mt.v1.RankTelemetry at least every `period` (worker_service.proto), so that the
// daemon's Prometheus endpoint stays current whatever the logging interval. Costs a few
// additions per step; memory is read only when a telemetry is taken.
// Thread-compatible: the training thread drives it.
#ifndef MT_WORKER_METRICS_RANK_TELEMETRY_H_
#define MT_WORKER_METRICS_RANK_TELEMETRY_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "mt/v1/worker_service.pb.h"
#include "worker/engine/trainer.h"

namespace mt::worker::metrics {

class TelemetryAccumulator {
 public:
  explicit TelemetryAccumulator(absl::Duration period = absl::Seconds(1),
                                absl::Time start = absl::Now())
      : period_(period), last_take_(start) {}

  // One step. Tokens/s and MFU are the latest logging interval's (StepMetrics' interval_*,
  // timed up to a device read) once there is one, a single step's before.
  void AddStep(const engine::StepMetrics& m);
  // Time in collectives, by collective ("all_reduce", "send" ...) and group ("dp", "tp" ...),
  // as worker/parallel/comm_stats.h names them: see mt.v1.CommunicationTime for the names the
  // daemon keeps.
  void AddCommunication(const std::string& collective, const std::string& group, double seconds,
                        int64_t calls);
  // True when steps were added and `period` has passed since the last Take.
  bool Due(absl::Time now) const {
    return pending_.step_seconds_size() > 0 && now - last_take_ >= period_;
  }
  // Everything since the last Take, with the latest step's values and `memory`.
  mt::v1::RankTelemetry Take(const engine::MemoryStats& memory, absl::Time now);

 private:
  absl::Duration period_;
  absl::Time last_take_;
  mt::v1::RankTelemetry pending_;
  // The latest log step's interval rate and MFU (0: none yet).
  double interval_tokens_per_second_ = 0.0;
  double interval_mfu_ = 0.0;
  // Seconds and calls by (collective, group) since the last Take.
  std::map<std::pair<std::string, std::string>, std::pair<double, int64_t>> comm_;
};

}  // namespace mt::worker::metrics

#endif  // MT_WORKER_METRICS_RANK_TELEMETRY_H_
