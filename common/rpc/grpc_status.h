// The one place where absl::Status and grpc::Status meet (DESIGN.md §8.1). Codes are the
// same canonical codes; messages pass through unchanged.
#ifndef MT_COMMON_RPC_GRPC_STATUS_H_
#define MT_COMMON_RPC_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace mt::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace mt::rpc

#endif  // MT_COMMON_RPC_GRPC_STATUS_H_
