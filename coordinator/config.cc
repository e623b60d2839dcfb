#include "coordinator/config.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/metrics/metrics_server.h"
#include "common/net/address.h"
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
  if (!advertise_address.empty() && (advertise_address.find_first_of(" /") != std::string::npos ||
                                     advertise_address.front() == ':')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--advertise-address '", advertise_address,
        "' must be host or host:port (an IPv6 address in brackets), e.g. 10.77.0.1:7070"));
  }
  if (!rpc::IsLoopbackAddress(listen_address) && allowed_roots.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen ", listen_address,
        " is not a loopback address; listening beyond this machine requires --allowed-root DIR "
        "(repeatable): the directories that jobs, imports and exports may use"));
  }
  MT_RETURN_IF_ERROR(ValidateSecurity());
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

std::string AdvertisedAddress(const CoordinatorConfig& config, int bound_port,
                              const std::string& host_name) {
  if (const std::string& a = config.advertise_address; !a.empty()) {
    if (net::ParseHostPort(a, "").ok()) return a;
    absl::string_view host = a;
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    return net::JoinHostPort(host, bound_port);
  }
  absl::StatusOr<net::HostPort> listen = net::ParseHostPort(config.listen_address, "--listen");
  std::string host = listen.ok() ? listen->host : "";
  if (host.empty() || host == "0.0.0.0" || host == "::") host = host_name;
  return net::JoinHostPort(host, bound_port);
}

absl::Status CoordinatorConfig::ValidateSecurity() const {
  MT_RETURN_IF_ERROR(rpc::ValidateServerTls(tls));
  if (!rpc::IsLoopbackAddress(listen_address) && !tls.enabled() && !insecure_allow_plaintext) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen ", listen_address,
        " is not a loopback address; bearer tokens would cross the network in clear text: "
        "give --tls-cert and --tls-key (docs/security.md), or --insecure-allow-plaintext on a "
        "network you trust"));
  }
  if (reflection != "auto" && reflection != "on" && reflection != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--reflection '", reflection, "' must be auto, on or off"));
  }
  if (metrics_port >= 0) {
    return metrics::CheckMetricsExposure(metrics_host, !metrics_token_file.empty(), metrics_public,
                                         "/metrics and /sd");
  }
  return absl::OkStatus();
}

bool CoordinatorConfig::ReflectionEnabled() const {
  return reflection == "on" || (reflection == "auto" && rpc::IsLoopbackAddress(listen_address));
}

}  // namespace mt::coordinator
