// The coordinator's configuration: filled by main.cc from flags, checked by Validate().
#ifndef MT_COORDINATOR_CONFIG_H_
#define MT_COORDINATOR_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/rpc/tls.h"

namespace mt::coordinator {

struct CoordinatorConfig {
  // host:port for gRPC. Loopback by default; anything else needs auth_token_file and TLS
  // (or insecure_allow_plaintext).
  std::string listen_address = "127.0.0.1:7070";
  // host[:port] workers and ranks dial (NAT, containers); empty = the listen address (a
  // wildcard listen address: this host's name). No port = the bound port.
  std::string advertise_address;
  // Directory of the SQLite database (jobs, events, workers). Required.
  std::string state_dir;
  // Seconds a cancelled or stopped rank gets between SIGTERM and SIGKILL.
  int stop_grace_seconds = 10;
  // File of accepted bearer tokens and their roles (common/rpc/auth.h); empty = no
  // authentication.
  std::string auth_token_file;
  // TLS on the gRPC port (--tls-cert/--tls-key, mutual with --tls-client-ca).
  rpc::ServerTlsFiles tls;
  // Lets a non-loopback listen address go without TLS (tokens then travel in clear text).
  bool insecure_allow_plaintext = false;
  // gRPC server reflection (grpcurl): "auto" = only when listening on loopback, "on", "off".
  std::string reflection = "auto";
  // Lets the metrics endpoint (/metrics and /sd) bind off loopback without a token.
  bool metrics_public = false;
  // The metrics endpoint's bearer token (first token of the file; empty = none) and HTTPS
  // files (common/metrics/metrics_security.h).
  std::string metrics_token_file;
  std::string metrics_tls_cert;
  std::string metrics_tls_key;
  // How often workers heartbeat, and the silence after which a worker is LOST.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration lost_after = absl::Seconds(10);
  // Prometheus endpoint (/metrics, and /sd for the workers' endpoints): -1 = off, 0 = any
  // free port. The binary's flag defaults to 9400.
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  // --allowed-root (repeatable): the directories that every path of a job (data, tokenizer,
  // save, load, TensorBoard) and of an import or export must resolve into
  // (common/base/confine.h). Empty = no confinement, allowed only on loopback.
  std::vector<std::string> allowed_roots;
  // Retention of ended jobs (JobManager::PruneEnded): at most this many (0 = no limit), and
  // none older than ended_job_ttl after their end (zero = forever).
  int keep_ended_jobs = 0;
  absl::Duration ended_job_ttl = absl::ZeroDuration();

  // Every field checked; errors name the flag and the fix.
  absl::Status Validate() const;
  // Whether the reflection service is registered (see `reflection`).
  bool ReflectionEnabled() const;

 private:
  // TLS, plaintext, reflection and the metrics endpoint's exposure.
  absl::Status ValidateSecurity() const;
};

// The host:port workers and ranks are told to dial: --advertise-address (the bound port added
// when it has none), else the listen address with the bound port, a wildcard host (0.0.0.0,
// [::]) replaced by `host_name`. IPv6 hosts come bracketed.
std::string AdvertisedAddress(const CoordinatorConfig& config, int bound_port,
                              const std::string& host_name);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_CONFIG_H_
