#include "coordinator/config.h"

#include "absl/strings/str_cat.h"
#include "common/rpc/auth.h"

namespace mt::coordinator {

absl::Status CoordinatorConfig::Validate() const {
  if (listen_address.empty() || listen_address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen '", listen_address, "' must be host:port, e.g. 127.0.0.1:7070"));
  }
  if (!rpc::IsLoopbackAddress(listen_address) && auth_token_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen ", listen_address,
        " is not a loopback address; listening beyond this machine requires --auth-token-file"));
  }
  if (state_dir.empty()) {
    return absl::InvalidArgumentError(
        "--state-dir is required: the directory where the coordinator keeps its database");
  }
  if (stop_grace_seconds < 1 || stop_grace_seconds > 600) {
    return absl::InvalidArgumentError("--stop-grace-seconds must be 1..600");
  }
  if (heartbeat_interval < absl::Milliseconds(10) || heartbeat_interval > absl::Minutes(1)) {
    return absl::InvalidArgumentError("--heartbeat-interval must be between 10ms and 1m");
  }
  if (lost_after < 2 * heartbeat_interval || lost_after > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        "--lost-after must be at least twice --heartbeat-interval and at most 1h");
  }
  if (keep_ended_jobs < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--keep-ended-jobs ", keep_ended_jobs,
                                                   " must be >= 0 (0 = keep every ended job)"));
  }
  if (ended_job_ttl < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--ended-job-ttl must be >= 0 (0 = keep ended jobs)");
  }
  if (metrics_port < -1 || metrics_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-port ", metrics_port, " must be -1 (off), 0 (any free port) or 1..65535"));
  }
  return absl::OkStatus();
}

}  // namespace mt::coordinator
