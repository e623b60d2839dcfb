// A daemon's Prometheus endpoint: a small HTTP server (CivetWeb, the server prometheus-cpp's
// own exposer uses) that serves the text exposition format of the collectables it is given on
// /metrics, and any further GET handlers the daemon adds (the coordinator's service discovery).
// The registry is the daemon's object, passed in; nothing here is global.
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
#include "absl/synchronization/mutex.h"
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

  // host is an address, port is 0..65535; errors name the flag (--metrics-host, --metrics-port).
  absl::Status Validate() const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};
using HttpHandler = std::function<HttpResponse()>;

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
  // Serves GET `path` (exact match) with `handler`; replaces an earlier handler for it.
  void Handle(const std::string& path, HttpHandler handler);
  // What /metrics returns now.
  std::string Scrape() const;

 private:
  MetricsServer() = default;
  static int OnRequest(mg_connection* conn, void* self);
  int Serve(mg_connection* conn);

  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  mg_context* context_ = nullptr;
  int port_ = 0;
  std::string address_;
  mutable absl::Mutex mu_;
  std::map<std::string, HttpHandler> handlers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mt::metrics

#endif  // MT_COMMON_METRICS_METRICS_SERVER_H_
