// The coordinator's configuration: filled by main.cc from flags, checked by Validate().
#ifndef MT_COORDINATOR_CONFIG_H_
#define MT_COORDINATOR_CONFIG_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace mt::coordinator {

struct CoordinatorConfig {
  // host:port for gRPC. Loopback by default; anything else needs auth_token_file.
  std::string listen_address = "127.0.0.1:7070";
  // Directory of the SQLite database (jobs, events, workers). Required.
  std::string state_dir;
  // Seconds a cancelled or stopped rank gets between SIGTERM and SIGKILL.
  int stop_grace_seconds = 10;
  // File of accepted bearer tokens (common/rpc/auth.h); empty = no authentication.
  std::string auth_token_file;
  // How often workers heartbeat, and the silence after which a worker is LOST.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration lost_after = absl::Seconds(10);
  // Prometheus endpoint (/metrics, and /sd for the workers' endpoints): -1 = off, 0 = any
  // free port. The binary's flag defaults to 9400.
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  // Retention of ended jobs (JobManager::PruneEnded): at most this many (0 = no limit), and
  // none older than ended_job_ttl after their end (zero = forever).
  int keep_ended_jobs = 0;
  absl::Duration ended_job_ttl = absl::ZeroDuration();

  // Every field checked; errors name the flag and the fix.
  absl::Status Validate() const;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_CONFIG_H_
