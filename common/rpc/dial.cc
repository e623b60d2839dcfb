#include "common/rpc/dial.h"

#include <utility>
#include <vector>

#include "common/base/status_macros.h"
#include "common/rpc/auth.h"

namespace mt::rpc {

absl::StatusOr<std::shared_ptr<grpc::Channel>> Dial(const DialOptions& options) {
  std::string token;
  if (!options.token_file.empty()) {
    absl::StatusOr<std::vector<std::string>> tokens = ReadTokenFile(options.token_file);
    if (!tokens.ok()) return Annotate(tokens.status(), "--token-file");
    token = tokens->front();
  }
  MT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                      MakeChannelCredentials(options.tls));
  MT_RETURN_IF_ERROR(CheckTokenTransport(options.address, !token.empty(), options.tls.enabled(),
                                         options.insecure_allow_plaintext));
  return MakeChannel(options.address, token, std::move(credentials));
}

}  // namespace mt::rpc
