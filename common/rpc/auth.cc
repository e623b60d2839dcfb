#include "common/rpc/auth.h"

#include <openssl/crypto.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"
#include "grpcpp/support/client_interceptor.h"

namespace mt::rpc {
namespace {

constexpr size_t kMinTokenBytes = 16;
constexpr size_t kMaxTokenBytes = 512;
constexpr absl::string_view kBearer = "Bearer ";

// Adds "authorization: Bearer <token>" to every outgoing call of a channel. Call credentials
// would need a secure transport; until TLS is layered on, an interceptor carries the token.
class BearerInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& token)
      : header_(absl::StrCat(kBearer, token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerInterceptor(&header_);
  }

 private:
  std::string header_;
};

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path) {
  MT_ASSIGN_OR_RETURN(std::string text, ReadFile(path, 1 << 20));
  std::vector<std::string> tokens;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    if (line.size() < kMinTokenBytes || line.size() > kMaxTokenBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": a token must be ", kMinTokenBytes, "..",
                       kMaxTokenBytes, " characters; generate one with `openssl rand -hex 32`"));
    }
    for (char c : line) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", line_no, ": a token may hold printable ASCII only"));
      }
    }
    tokens.emplace_back(line);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds no token"));
  }
  return tokens;
}

bool IsLoopbackAddress(absl::string_view address) {
  absl::string_view host = address;
  if (absl::ConsumePrefix(&host, "[")) {
    const size_t end = host.find(']');
    return end != absl::string_view::npos && host.substr(0, end) == "::1";
  }
  const size_t colon = host.rfind(':');
  if (colon != absl::string_view::npos) host = host.substr(0, colon);
  if (host == "localhost") return true;
  std::vector<absl::string_view> parts = absl::StrSplit(host, '.');
  if (parts.size() != 4 || parts[0] != "127") return false;
  for (absl::string_view p : parts) {
    int v;
    if (!absl::SimpleAtoi(p, &v) || v < 0 || v > 255) return false;
  }
  return true;
}

grpc::Status Authenticator::Check(const grpc::ServerContext& context) const {
  if (tokens_.empty()) return grpc::Status::OK;
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing bearer token: pass --token-file or set MT_TOKEN_FILE");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, kBearer)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "authorization metadata must read 'Bearer <token>'");
  }
  for (const std::string& token : tokens_) {
    if (ConstantTimeEquals(value, token)) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bearer token not accepted");
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const std::string& token) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  if (token.empty()) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerInterceptorFactory>(token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, grpc::InsecureChannelCredentials(), args, std::move(factories));
}

}  // namespace mt::rpc
