// The HTTPS side of a daemon's Prometheus endpoint (metrics_server.h). Debian's CivetWeb 1.15
// cannot serve TLS against OpenSSL 3: after every handshake it calls SSL_get_peer_certificate,
// a symbol OpenSSL 3 no longer exports, through the null pointer its loader left (a segfault on
// the first connection, reproduced with its own `ssl_certificate` option). So with
// --metrics-tls-cert the endpoint listens here instead: OpenSSL does the TLS (1.2 and later),
// and this serves one HTTP/1.x request per connection, `threads` connections at a time, each
// with 10 s to send its request (headers up to 16 KiB; no body is read) and 10 s per write.
//
// Thread-safe: the responder is called from the listener's threads.
#ifndef MT_COMMON_METRICS_TLS_LISTENER_H_
#define MT_COMMON_METRICS_TLS_LISTENER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace mt::metrics {

struct HttpRequestLine {
  std::string method;         // "GET"
  std::string path;           // "/metrics", without the query
  std::string authorization;  // the Authorization header's value, "" when absent
};

// The raw HTTP response (status line, headers, body) for a request.
using TlsResponder = std::function<std::string(const HttpRequestLine& request)>;

// Parses the head of a request (request line and headers, without the blank line); false for
// a malformed one.
bool ParseRequestHead(absl::string_view head, HttpRequestLine* request);

class TlsListener {
 public:
  // Binds host:port (0 = any free port) and starts `threads` threads. Errors name the flags
  // (--metrics-tls-cert, --metrics-tls-key, --metrics-host/--metrics-port).
  static absl::StatusOr<std::unique_ptr<TlsListener>> Start(const std::string& host, int port,
                                                            const std::string& cert_file,
                                                            const std::string& key_file,
                                                            int threads, TlsResponder responder);
  // Stops accepting, lets the connections in progress finish (each is bounded by its
  // timeouts), joins the threads.
  ~TlsListener();
  TlsListener(const TlsListener&) = delete;
  TlsListener& operator=(const TlsListener&) = delete;

  int port() const { return port_; }

 private:
  TlsListener() = default;
  void AcceptLoop();
  void ServeConnection(int fd);

  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd; readable once the listener stops
  int port_ = 0;
  TlsResponder responder_;
  std::vector<std::thread> threads_;
};

}  // namespace mt::metrics

#endif  // MT_COMMON_METRICS_TLS_LISTENER_H_
