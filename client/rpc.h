// How mtctl talks to the coordinator, written once: the stub, a unary call with its deadline,
// and the page loop of the List* calls. Pagination is split from gRPC (ReadAllPages) so that it
// can be tested against a fake page source. Thread-compatible (one stub per verb).
#ifndef MT_CLIENT_RPC_H_
#define MT_CLIENT_RPC_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/common.h"
#include "common/base/status_macros.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/client_context.h"
#include "mt/v1/client_service.grpc.pb.h"

namespace mt::client {

using Stub = mt::v1::ClientService::Stub;

// Entries per List* page: large enough that a listing is one round trip in practice.
inline constexpr int kPageSize = 1000;

// A stub on the coordinator named by `options` (and its bearer token).
absl::StatusOr<std::unique_ptr<Stub>> NewStub(const GlobalOptions& options);

// A context whose deadline is `timeout` from now.
void SetDeadline(grpc::ClientContext* context, absl::Duration timeout);

// One unary call with a deadline, its status mapped back to absl.
//   MT_RETURN_IF_ERROR(Call(stub, &Stub::GetJob, request, &job, absl::Seconds(30)));
template <typename Request, typename Response>
absl::Status Call(Stub* stub,
                  grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                  const Request& request, Response* response, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  return rpc::FromGrpcStatus((stub->*method)(&context, request, response));
}

// Fetches the page that `page_token` names (empty: the first), keeps its entries, and returns
// the next page's token (empty: that was the last page).
using PageSource = std::function<absl::StatusOr<std::string>(const std::string& page_token)>;

// Calls `fetch` from the first page until a page returns no next token; stops at the first error.
absl::Status ReadAllPages(const PageSource& fetch);

// Every entry of a List* call: `request` (its filters) is sent once per page with the page size
// and token filled in; the pages' entries are appended in order, total_count is the last page's.
template <typename Request, typename Response>
absl::StatusOr<Response> ListAll(
    Request request, const std::function<absl::Status(const Request&, Response*)>& call) {
  Response all;
  MT_RETURN_IF_ERROR(ReadAllPages([&](const std::string& token) -> absl::StatusOr<std::string> {
    request.set_page_size(kPageSize);
    request.set_page_token(token);
    Response page;
    MT_RETURN_IF_ERROR(call(request, &page));
    all.MergeFrom(page);  // appends the repeated entries
    return page.next_page_token();
  }));
  all.clear_next_page_token();
  return all;
}

// ListAll over one method of the coordinator's stub, each page with its own deadline.
template <typename Request, typename Response>
absl::StatusOr<Response> ListAll(Stub* stub,
                                 grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                              Response*),
                                 Request request, absl::Duration timeout) {
  return ListAll<Request, Response>(std::move(request),
                                    [&](const Request& page_request, Response* page) {
                                      return Call(stub, method, page_request, page, timeout);
                                    });
}

}  // namespace mt::client

#endif  // MT_CLIENT_RPC_H_
