// The one table of which role each coordinator RPC needs (docs/security.md shows it). Handlers
// look themselves up by name through MT_CHECK_AUTH (service_util.h); a method missing from the
// table needs admin, and rpc_roles_test walks every method of both services against it.
// Stateless; thread-safe.
#ifndef MT_COORDINATOR_RPC_ROLES_H_
#define MT_COORDINATOR_RPC_ROLES_H_

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/rpc/auth.h"

namespace mt::coordinator {

// Every (method, access) pair of mt.v1.ClientService and mt.v1.WorkerService, method names
// without the service (they are unique across both).
const std::vector<std::pair<absl::string_view, rpc::Access>>& RpcAccessTable();

// The access `method` needs: its table entry, else admin (deny by default).
rpc::Access RequiredAccess(absl::string_view method);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_RPC_ROLES_H_
