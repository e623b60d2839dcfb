#include "tests/testutil/http.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "openssl/err.h"
#include "openssl/ssl.h"
#include "openssl/x509v3.h"

namespace mt::testutil {
namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
bool WaitReady(int fd, short events, absl::Time deadline) {
  while (true) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(ms));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

}  // namespace

std::string UrlEncode(absl::string_view value) {
  std::string out;
  for (unsigned char c : value) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

namespace {

// A TCP connection to host:port (the first address that answers).
absl::StatusOr<int> Connect(const std::string& host_port, std::string* host) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", host_port, "' is not host:port"));
  }
  *host = host_port.substr(0, colon);
  const std::string port = host_port.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = ::getaddrinfo(host->c_str(), port.c_str(), &hints, &found); e != 0) {
    return absl::UnavailableError(absl::StrCat(host_port, ": ", ::gai_strerror(e)));
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("connect ", host_port, ": ", std::strerror(errno)));
  }
  return fd;
}

// Sends `request` and reads until the server closes, over the plain socket.
absl::StatusOr<std::string> ExchangePlain(int fd, const std::string& request, absl::Time deadline) {
  size_t sent = 0;
  while (sent < request.size()) {
    if (!WaitReady(fd, POLLOUT, deadline)) return absl::DeadlineExceededError("send timed out");
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[65536];
  while (true) {
    if (!WaitReady(fd, POLLIN, deadline)) return absl::DeadlineExceededError("recv timed out");
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    raw.append(buf, static_cast<size_t>(n));
  }
  return raw;
}

std::string TlsError(absl::string_view what) {
  char text[256] = {0};
  ERR_error_string_n(ERR_get_error(), text, sizeof(text));
  ERR_clear_error();
  return absl::StrCat(what, ": ", text);
}

// The same over TLS: the server's certificate must chain to `ca` and name `host` (a DNS name
// or an IP address in its subjectAltName).
absl::StatusOr<std::string> ExchangeTls(int fd, const std::string& host, const std::string& ca,
                                        const std::string& request, absl::Time deadline) {
  const int64_t ms = std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now()));
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        &SSL_CTX_free);
  if (ctx == nullptr) return absl::InternalError(TlsError("SSL_CTX_new"));
  if (SSL_CTX_load_verify_locations(ctx.get(), ca.c_str(), nullptr) != 1) {
    return absl::InvalidArgumentError(TlsError(absl::StrCat("CA ", ca)));
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), &SSL_free);
  if (ssl == nullptr || SSL_set_fd(ssl.get(), fd) != 1) {
    return absl::InternalError(TlsError("SSL_new"));
  }
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
  if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) {
    SSL_set_tlsext_host_name(ssl.get(), host.c_str());
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
  }
  if (SSL_connect(ssl.get()) != 1) return absl::UnavailableError(TlsError("TLS handshake"));
  if (SSL_write(ssl.get(), request.data(), static_cast<int>(request.size())) <= 0) {
    return absl::UnavailableError(TlsError("TLS write"));
  }
  std::string raw;
  char buf[65536];
  while (true) {
    const int n = SSL_read(ssl.get(), buf, sizeof(buf));
    if (n > 0) {
      raw.append(buf, static_cast<size_t>(n));
      continue;
    }
    const int e = SSL_get_error(ssl.get(), n);
    if (e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL)
      break;  // closed (with or without
              // close_notify)
    return absl::UnavailableError(TlsError("TLS read"));
  }
  return raw;
}

absl::StatusOr<HttpResult> ParseResponse(const std::string& raw) {
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return absl::DataLossError("no HTTP header in the response");
  HttpResult result;
  result.body = raw.substr(end + 4);
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(raw).substr(0, end), "\r\n");
  std::vector<absl::string_view> status_line = absl::StrSplit(lines[0], ' ');
  if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &result.status)) {
    return absl::DataLossError(absl::StrCat("bad status line: ", lines[0]));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t c = lines[i].find(':');
    if (c == absl::string_view::npos) continue;
    const absl::string_view value = absl::StripAsciiWhitespace(lines[i].substr(c + 1));
    if (absl::EqualsIgnoreCase(lines[i].substr(0, c), "content-type")) {
      result.content_type = std::string(value);
    } else if (absl::EqualsIgnoreCase(lines[i].substr(0, c), "www-authenticate")) {
      result.www_authenticate = std::string(value);
    }
  }
  return result;
}

}  // namespace

absl::StatusOr<HttpResult> HttpGet(const std::string& host_port, const std::string& target,
                                   absl::Duration timeout) {
  HttpGetOptions options;
  options.timeout = timeout;
  return HttpGet(host_port, target, options);
}

absl::StatusOr<HttpResult> HttpGet(const std::string& host_port, const std::string& target,
                                   const HttpGetOptions& options) {
  const absl::Time deadline = absl::Now() + options.timeout;
  std::string host;
  absl::StatusOr<int> fd = Connect(host_port, &host);
  if (!fd.ok()) return fd.status();
  std::string request = absl::StrCat("GET ", target, " HTTP/1.0\r\nHost: ", host_port,
                                     "\r\nAccept: */*\r\nConnection: close\r\n");
  if (!options.bearer_token.empty()) {
    absl::StrAppend(&request, "Authorization: Bearer ", options.bearer_token, "\r\n");
  }
  request += "\r\n";
  absl::StatusOr<std::string> raw = options.tls_ca.empty()
                                        ? ExchangePlain(*fd, request, deadline)
                                        : ExchangeTls(*fd, host, options.tls_ca, request, deadline);
  ::close(*fd);
  if (!raw.ok()) {
    return absl::Status(raw.status().code(),
                        absl::StrCat("GET ", host_port, target, ": ", raw.status().message()));
  }
  return ParseResponse(*raw);
}

}  // namespace mt::testutil
