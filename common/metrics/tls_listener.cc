#include "common/metrics/tls_listener.h"

#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "openssl/err.h"
#include "openssl/ssl.h"

namespace mt::metrics {
namespace {

constexpr size_t kMaxHead = 16 * 1024;
constexpr absl::Duration kRequestTimeout = absl::Seconds(10);

std::string OpenSslError() {
  char text[256] = {0};
  const unsigned long code = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "unknown OpenSSL error";
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

absl::StatusOr<SSL_CTX*> MakeContext(const std::string& cert_file, const std::string& key_file) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return absl::InternalError(absl::StrCat("metrics TLS: ", OpenSslError()));
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
    SSL_CTX_free(ctx);
    return absl::InternalError(absl::StrCat("metrics TLS: ", OpenSslError()));
  }
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-tls-cert ", cert_file, ": not a PEM certificate (chain): ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-tls-key ", key_file,
                     ": not the PEM private key of --metrics-tls-cert: ", OpenSslError()));
  }
  return ctx;
}

// A listening socket on host:port (non-blocking, so that threads racing for a connection
// never block in accept); its bound port in `bound`.
absl::StatusOr<int> Listen(const std::string& host, int port, int* bound) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (int e = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); e != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-host ", host, ": ", ::gai_strerror(e)));
  }
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int one = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::bind(fd, found->ai_addr, found->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
    const int err = errno;
    ::freeaddrinfo(found);
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", host, ":", port, ": ",
                                               std::strerror(err),
                                               "; choose another --metrics-port, or 0 for any "
                                               "free port"));
  }
  ::freeaddrinfo(found);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return fd;
}

std::string BadRequest(int status, absl::string_view reason) {
  return absl::StrCat("HTTP/1.1 ", status, " ", reason,
                      "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 0\r\n"
                      "Connection: close\r\n\r\n");
}

}  // namespace

bool ParseRequestHead(absl::string_view head, HttpRequestLine* request) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  std::vector<absl::string_view> first = absl::StrSplit(lines[0], ' ');
  if (first.size() != 3 || first[0].empty() || first[1].empty() || first[1][0] != '/' ||
      !absl::StartsWith(first[2], "HTTP/1.")) {
    return false;
  }
  request->method = std::string(first[0]);
  request->path = std::string(first[1].substr(0, first[1].find('?')));
  request->authorization.clear();
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos || colon == 0) return false;
    if (absl::EqualsIgnoreCase(lines[i].substr(0, colon), "authorization")) {
      request->authorization = std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
  }
  return true;
}

absl::StatusOr<std::unique_ptr<TlsListener>> TlsListener::Start(const std::string& host, int port,
                                                                const std::string& cert_file,
                                                                const std::string& key_file,
                                                                int threads,
                                                                TlsResponder responder) {
  std::unique_ptr<TlsListener> l(new TlsListener());
  absl::StatusOr<SSL_CTX*> ctx = MakeContext(cert_file, key_file);
  if (!ctx.ok()) return ctx.status();
  l->ctx_ = *ctx;
  absl::StatusOr<int> fd = Listen(host, port, &l->port_);
  if (!fd.ok()) return fd.status();
  l->listen_fd_ = *fd;
  l->stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (l->stop_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  l->responder_ = std::move(responder);
  for (int i = 0; i < threads; ++i)
    l->threads_.emplace_back([raw = l.get()] { raw->AcceptLoop(); });
  return l;
}

TlsListener::~TlsListener() {
  if (stop_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof(one));
  }
  for (std::thread& t : threads_) t.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

void TlsListener::AcceptLoop() {
  // A peer that closes early must not kill the daemon: OpenSSL writes with write(2), so the
  // SIGPIPE it raises stays blocked (pending) on this thread and the write fails with EPIPE.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      ServeConnection(fd);
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      absl::SleepFor(absl::Milliseconds(100));  // EMFILE and the like: do not spin
    }
  }
}

void TlsListener::ServeConnection(int fd) {
  const absl::Time deadline = absl::Now() + kRequestTimeout;
  const timeval tv{absl::ToInt64Seconds(kRequestTimeout), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx_), &SSL_free);
  std::string head;
  size_t end = std::string::npos;
  if (ssl != nullptr && SSL_set_fd(ssl.get(), fd) == 1 && SSL_accept(ssl.get()) == 1) {
    char buf[4096];
    while ((end = head.find("\r\n\r\n")) == std::string::npos && head.size() <= kMaxHead &&
           absl::Now() < deadline) {
      const int n = SSL_read(ssl.get(), buf, sizeof(buf));
      if (n <= 0) break;
      head.append(buf, static_cast<size_t>(n));
    }
    std::string response;
    HttpRequestLine request;
    if (end == std::string::npos) {
      if (head.size() > kMaxHead) response = BadRequest(431, "Request Header Fields Too Large");
    } else if (!ParseRequestHead(absl::string_view(head).substr(0, end), &request)) {
      response = BadRequest(400, "Bad Request");
    } else {
      response = responder_(request);
    }
    for (size_t sent = 0; sent < response.size();) {
      const int n = SSL_write(ssl.get(), response.data() + sent,
                              static_cast<int>(std::min<size_t>(response.size() - sent, INT_MAX)));
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    SSL_shutdown(ssl.get());
  }
  ERR_clear_error();
  ssl.reset();
  ::close(fd);
}

}  // namespace mt::metrics
