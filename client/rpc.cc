#include "client/rpc.h"

#include <chrono>

#include "absl/time/clock.h"

namespace mt::client {

absl::StatusOr<std::unique_ptr<Stub>> NewStub(const GlobalOptions& options) {
  MT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, Connect(options));
  return mt::v1::ClientService::NewStub(channel);
}

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

absl::Status ReadAllPages(const PageSource& fetch) {
  std::string token;
  do {
    MT_ASSIGN_OR_RETURN(token, fetch(token));
  } while (!token.empty());
  return absl::OkStatus();
}

}  // namespace mt::client
