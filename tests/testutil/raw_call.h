// One gRPC call of any kind (unary or streaming) by its full method name, with raw request
// bytes: for tests that reach services without their generated stubs (every method of a
// service from its descriptor, grpc.health.v1, server reflection). Thread-compatible free
// function; no state.
#ifndef MT_TESTS_TESTUTIL_RAW_CALL_H_
#define MT_TESTS_TESTUTIL_RAW_CALL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace mt::testutil {

struct RawCallResult {
  grpc::Status status;
  // The first response message's bytes, when one came.
  bool has_response = false;
  std::string response;
};

// Calls `method` ("/package.Service/Method") on `channel`: sends `metadata`, writes `request`
// once, half-closes, reads at most one response and returns the call's final status. Bounded
// by `timeout`.
RawCallResult RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& request,
                      const std::vector<std::pair<std::string, std::string>>& metadata = {},
                      absl::Duration timeout = absl::Seconds(5));

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_RAW_CALL_H_
