// A daemon's Prometheus endpoint: a small HTTP server (CivetWeb, the server prometheus-cpp's
// own exposer uses) that serves the text exposition format of the collectables it is given on
// /metrics, and any further GET handlers the daemon adds (the coordinator's service discovery).
// The registry is the daemon's object, passed in; nothing here is global.
//
// Optionally HTTPS (a certificate chain and key, TLS 1.2 at least; served by TlsListener,
// tls_listener.h, in place of CivetWeb) and a bearer token that
// every request must carry (Prometheus: `authorization: {credentials_file: ...}`); both
// daemons follow one exposure rule, CheckMetricsExposure (docs/security.md).
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   MT_ASSIGN_OR_RETURN(auto server, MetricsServer::Start({"127.0.0.1", 0}, {registry}));
//   server->address();   // "127.0.0.1:41234"
//
// Thread-safe: handlers run on the server's threads; Handle() may be called at any time.
#ifndef MT_COMMON_METRICS_METRICS_SERVER_H_
#define MT_COMMON_METRICS_METRICS_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/tls_listener.h"
#include "prometheus/collectable.h"

struct mg_context;
struct mg_connection;

namespace mt::metrics {

struct MetricsServerOptions {
  // Address to bind: "127.0.0.1" (this machine only), "0.0.0.0" (every interface) ...
  std::string host = "127.0.0.1";
  // 0 = any free port (see port()).
  int port = 0;
  // The host name others reach us by, when `host` is a wildcard; empty = this machine's name.
  std::string advertised_host;
  // Server threads (a scrape at a time each).
  int threads = 2;
  // HTTPS instead of HTTP: PEM certificate (chain) and private key files, both or neither
  // (--metrics-tls-cert, --metrics-tls-key).
  std::string tls_cert;
  std::string tls_key;
  // When not empty, every request must carry "Authorization: Bearer <bearer_token>" (compared
  // in constant time); others get 401 (--metrics-token-file).
  std::string bearer_token;

  // host is an address, port is 0..65535; errors name the flag (--metrics-host, --metrics-port).
  absl::Status Validate() const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};
using HttpHandler = std::function<HttpResponse()>;

// The rule of every daemon's Prometheus endpoint: on a loopback host (127.0.0.0/8, ::1,
// localhost) it may answer anyone; elsewhere it needs a bearer token (`has_token`) or the
// operator's explicit --metrics-public. INVALID_ARGUMENT naming the flags otherwise; `paths`
// names what would be exposed ("/metrics", "/metrics and /sd").
absl::Status CheckMetricsExposure(const std::string& host, bool has_token, bool metrics_public,
                                  absl::string_view paths);

// The exposition of `collectables` in Prometheus text format 0.0.4, families in order.
std::string SerializeMetrics(const std::vector<std::shared_ptr<prometheus::Collectable>>& sources);

class MetricsServer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const MetricsServerOptions& options,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (resolves port 0).
  int port() const { return port_; }
  // host:port that Prometheus scrapes (a wildcard bind is advertised under the host name).
  const std::string& address() const { return address_; }
  // "http://address/path", or "https://..." with TLS.
  std::string Url(absl::string_view path) const;
  // Serves GET `path` (exact match) with `handler`; replaces an earlier handler for it.
  void Handle(const std::string& path, HttpHandler handler);
  // What /metrics returns now.
  std::string Scrape() const;

 private:
  MetricsServer() = default;
  static int OnRequest(mg_connection* conn, void* self);
  int Serve(mg_connection* conn);
  // The answer to one request, whichever listener (CivetWeb over HTTP, TlsListener over HTTPS)
  // took it; `authorization` is the header's value ("" when absent).
  HttpResponse Respond(absl::string_view method, absl::string_view path,
                       absl::string_view authorization);
  bool Authorized(absl::string_view authorization) const;
  // Sets port_ and address_ from the bound port.
  void Advertise(const MetricsServerOptions& options, int port);

  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  mg_context* context_ = nullptr;     // plain HTTP
  std::unique_ptr<TlsListener> tls_;  // HTTPS instead (tls_listener.h says why not CivetWeb)
  int port_ = 0;
  std::string address_;
  std::string bearer_token_;  // set before serving, then read-only
  mutable absl::Mutex mu_;
  std::map<std::string, HttpHandler> handlers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mt::metrics

#endif  // MT_COMMON_METRICS_METRICS_SERVER_H_
