// Fuzz target: the request head parser of the metrics endpoint's HTTPS listener
// (common/metrics/tls_listener.h ParseRequestHead), which reads what any client of a
// non-loopback --metrics-host sends. An accepted head has a method, a path starting with '/'
// and no query, and an Authorization value without surrounding blanks.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "common/metrics/tls_listener.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mt::metrics::HttpRequestLine request;
  if (!mt::metrics::ParseRequestHead(mt::fuzz::AsView(data, size), &request)) return 0;
  if (request.method.empty() || request.path.empty() || request.path[0] != '/' ||
      request.path.find('?') != std::string::npos ||
      absl::StripAsciiWhitespace(request.authorization) != request.authorization) {
    std::abort();
  }
  return 0;
}
