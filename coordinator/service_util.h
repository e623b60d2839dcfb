// What the client and worker gRPC services share: the token and role check at the top of every
// handler (the role each method needs is in rpc_roles.h) and the mapping of a component's StatusOr
// answer onto the response message. Stateless; thread-safe.
#ifndef MT_COORDINATOR_SERVICE_UTIL_H_
#define MT_COORDINATOR_SERVICE_UTIL_H_

#include <utility>

#include "absl/status/statusor.h"
#include "common/rpc/grpc_status.h"
#include "coordinator/rpc_roles.h"
#include "grpcpp/support/status.h"

// Returns the authenticator's refusal from the enclosing handler. A macro because it must
// return from the handler itself, and because the handler's own name (__func__, the RPC's
// name) is the key of the role table; `auth_` is the service's rpc::Authenticator*.
#define MT_CHECK_AUTH(context)                                                               \
  do {                                                                                       \
    if (grpc::Status auth_status =                                                           \
            auth_->Check(*(context), __func__, ::mt::coordinator::RequiredAccess(__func__)); \
        !auth_status.ok()) {                                                                 \
      return auth_status;                                                                    \
    }                                                                                        \
  } while (false)

// The same check, also filling `caller` (an rpc::Principal) with who made the call, for the
// handlers that act on what a caller owns (coordinator/job_access.h).
#define MT_CHECK_AUTH_AS(context, caller)                                                  \
  do {                                                                                     \
    if (grpc::Status auth_status = auth_->Check(                                           \
            *(context), __func__, ::mt::coordinator::RequiredAccess(__func__), &(caller)); \
        !auth_status.ok()) {                                                               \
      return auth_status;                                                                  \
    }                                                                                      \
  } while (false)

namespace mt::coordinator {

// Moves an answer into `response`, or maps its error (common/rpc) for the client.
template <typename T>
grpc::Status Reply(absl::StatusOr<T> answer, T* response) {
  if (!answer.ok()) return rpc::ToGrpcStatus(answer.status());
  *response = *std::move(answer);
  return grpc::Status::OK;
}

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_SERVICE_UTIL_H_
