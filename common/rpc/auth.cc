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

// Adds "authorization: Bearer <token>" to every outgoing call of a channel. An interceptor
// rather than call credentials, so that the same path serves TLS and loopback plaintext.
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

}  // namespace

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kSubmit:
      return "submit";
    case Role::kRead:
      return "read";
    case Role::kWorker:
      return "worker";
  }
  return "?";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  for (Role r : {Role::kAdmin, Role::kSubmit, Role::kRead, Role::kWorker}) {
    if (name == RoleName(r)) return r;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role '", name, "': use admin, submit, read or worker"));
}

absl::string_view AccessName(Access access) {
  switch (access) {
    case Access::kRead:
      return "read";
    case Access::kSubmit:
      return "submit";
    case Access::kAdmin:
      return "admin";
    case Access::kWorker:
      return "worker";
  }
  return "?";
}

bool Allows(Role role, Access access) {
  if (role == Role::kAdmin) return true;
  switch (access) {
    case Access::kRead:
      return role == Role::kRead || role == Role::kSubmit;
    case Access::kSubmit:
      return role == Role::kSubmit;
    case Access::kAdmin:
      return false;
    case Access::kWorker:
      return role == Role::kWorker;
  }
  return false;
}

namespace {

absl::Status CheckToken(absl::string_view token) {
  if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a token must be ", kMinTokenBytes, "..",
                                                   kMaxTokenBytes,
                                                   " characters; generate one with "
                                                   "`openssl rand -hex 32`"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError("a token may hold printable ASCII only");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckName(absl::string_view name) {
  if (name.empty() || name.size() > 64) {
    return absl::InvalidArgumentError("a name must be 1..64 characters");
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-' && c != '@') {
      return absl::InvalidArgumentError(
          absl::StrCat("name '", name, "' may hold letters, digits and . _ - @ only"));
    }
  }
  return absl::OkStatus();
}

// One non-comment line: TOKEN, ROLE TOKEN or ROLE NAME TOKEN.
absl::StatusOr<TokenEntry> ParseTokenLine(absl::string_view line) {
  std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
  TokenEntry entry;
  if (fields.size() > 3) {
    return absl::InvalidArgumentError(
        "expected 'ROLE NAME TOKEN', 'ROLE TOKEN' or a bare TOKEN (= admin)");
  }
  if (fields.size() >= 2) {
    MT_ASSIGN_OR_RETURN(entry.role, ParseRole(fields[0]));
  }
  entry.name = std::string(fields.size() == 3 ? fields[1] : RoleName(entry.role));
  MT_RETURN_IF_ERROR(CheckName(entry.name));
  MT_RETURN_IF_ERROR(CheckToken(fields.back()));
  entry.token = std::string(fields.back());
  return entry;
}

}  // namespace

absl::StatusOr<std::vector<TokenEntry>> ReadTokenTable(const std::string& path) {
  MT_ASSIGN_OR_RETURN(std::string text, ReadFile(path, 1 << 20));
  std::vector<TokenEntry> entries;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    absl::StatusOr<TokenEntry> entry = ParseTokenLine(line);
    if (!entry.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": ", entry.status().message()));
    }
    for (const TokenEntry& e : entries) {
      if (e.token == entry->token) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", line_no, ": this token is listed twice; each must be unique"));
      }
    }
    entries.push_back(*std::move(entry));
  }
  if (entries.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds no token"));
  }
  return entries;
}

absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path) {
  MT_ASSIGN_OR_RETURN(std::vector<TokenEntry> entries, ReadTokenTable(path));
  std::vector<std::string> tokens;
  for (TokenEntry& e : entries) tokens.push_back(std::move(e.token));
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

const TokenEntry* Authenticator::Find(const grpc::ServerContext& context,
                                      grpc::Status* error) const {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    *error = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "missing bearer token: pass --token-file or set MT_TOKEN_FILE");
    return nullptr;
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, kBearer)) {
    *error = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "authorization metadata must read 'Bearer <token>'");
    return nullptr;
  }
  // Every entry is compared, so that the time taken does not tell which one matched.
  const TokenEntry* found = nullptr;
  for (const TokenEntry& entry : tokens_) {
    if (ConstantTimeEquals(value, entry.token)) found = &entry;
  }
  if (found == nullptr) {
    *error = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bearer token not accepted");
  }
  return found;
}

grpc::Status Authenticator::Check(const grpc::ServerContext& context, absl::string_view method,
                                  Access access, Principal* caller) const {
  if (tokens_.empty()) {
    if (caller != nullptr) *caller = Principal{};
    return grpc::Status::OK;
  }
  grpc::Status error;
  const TokenEntry* entry = Find(context, &error);
  if (entry == nullptr) return error;
  if (!Allows(entry->role, access)) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(method, " needs the ", AccessName(access), " role (or admin); token '",
                     entry->name, "' has role ", RoleName(entry->role)));
  }
  if (caller != nullptr) *caller = Principal{entry->name, entry->role};
  return grpc::Status::OK;
}

void AllowKeepalivePings(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              kKeepaliveTimeMs / 2);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 5 * kKeepaliveTimeMs);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const std::string& token,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kMinConnectTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  if (token.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerInterceptorFactory>(token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(factories));
}

}  // namespace mt::rpc
