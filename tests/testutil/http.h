// A plain HTTP/1.0 GET over a TCP socket (or over TLS, OpenSSL), for tests and benchmarks that
// talk to real HTTP servers (our metrics endpoints, Prometheus's API). Thread-safe free
// functions.
#ifndef MT_TESTS_TESTUTIL_HTTP_H_
#define MT_TESTS_TESTUTIL_HTTP_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace mt::testutil {

struct HttpResult {
  int status = 0;
  std::string content_type;
  std::string body;
  std::string www_authenticate;  // the header's value, when the server sent one
};

struct HttpGetOptions {
  // Sent as "Authorization: Bearer <bearer_token>" when not empty.
  std::string bearer_token;
  // HTTPS when not empty: the server's certificate must chain to this CA (PEM) and name the
  // host (DNS name or IP address).
  std::string tls_ca;
  absl::Duration timeout = absl::Seconds(10);
};

// GET http://`host_port``target` (target = path and query, e.g. "/metrics").
absl::StatusOr<HttpResult> HttpGet(const std::string& host_port, const std::string& target,
                                   absl::Duration timeout = absl::Seconds(10));
absl::StatusOr<HttpResult> HttpGet(const std::string& host_port, const std::string& target,
                                   const HttpGetOptions& options);

// Percent-encodes a query parameter value.
std::string UrlEncode(absl::string_view value);

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_HTTP_H_
