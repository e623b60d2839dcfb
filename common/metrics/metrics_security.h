// The security flags of a daemon's Prometheus endpoint, the same on mt-coordinator and
// mt-worker (docs/security.md): --metrics-token-file (every request must carry that bearer
// token), --metrics-tls-cert/--metrics-tls-key (HTTPS) and --metrics-public (serve a
// non-loopback --metrics-host without a token). Stateless; thread-safe.
#ifndef MT_COMMON_METRICS_METRICS_SECURITY_H_
#define MT_COMMON_METRICS_METRICS_SECURITY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/metrics/metrics_server.h"

namespace mt::metrics {

struct MetricsSecurityFlags {
  // A token file (common/rpc/auth.h's format); its first token is the one Prometheus must
  // send. The bare token on one line suits Prometheus's `credentials_file` as well.
  std::string token_file;
  std::string tls_cert;
  std::string tls_key;
  bool metrics_public = false;
};

// Fills `options` (whose host is set) with the TLS files and the token read from
// flags.token_file, then checks the exposure rule (CheckMetricsExposure) for `paths`
// ("/metrics", "/metrics and /sd"). Errors name the flag.
absl::Status ApplyMetricsSecurity(const MetricsSecurityFlags& flags, absl::string_view paths,
                                  MetricsServerOptions* options);

}  // namespace mt::metrics

#endif  // MT_COMMON_METRICS_METRICS_SECURITY_H_
