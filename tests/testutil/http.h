// A plain HTTP/1.0 GET over a TCP socket, for tests and benchmarks that talk to real HTTP
// servers (our metrics endpoints, Prometheus's API). Thread-safe free functions.
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
};

// GET http://`host_port``target` (target = path and query, e.g. "/metrics").
absl::StatusOr<HttpResult> HttpGet(const std::string& host_port, const std::string& target,
                                   absl::Duration timeout = absl::Seconds(10));

// Percent-encodes a query parameter value.
std::string UrlEncode(absl::string_view value);

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_HTTP_H_
