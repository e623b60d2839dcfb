#include "common/metrics/metrics_security.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc/auth.h"

namespace mt::metrics {

absl::Status ApplyMetricsSecurity(const MetricsSecurityFlags& flags, absl::string_view paths,
                                  MetricsServerOptions* options) {
  options->tls_cert = flags.tls_cert;
  options->tls_key = flags.tls_key;
  options->bearer_token.clear();
  if (!flags.token_file.empty()) {
    absl::StatusOr<std::vector<std::string>> tokens = rpc::ReadTokenFile(flags.token_file);
    if (!tokens.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--metrics-token-file: ", tokens.status().message()));
    }
    options->bearer_token = tokens->front();  // ReadTokenFile refuses a file without one
  }
  return CheckMetricsExposure(options->host, !options->bearer_token.empty(), flags.metrics_public,
                              paths);
}

}  // namespace mt::metrics
