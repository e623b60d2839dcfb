#include "common/metrics/metrics_server.h"

#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "civetweb.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace mt::metrics {
namespace {

std::string HostName() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

bool IsWildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

void WriteResponse(mg_connection* conn, const HttpResponse& r) {
  const char* reason = r.status == 200 ? "OK" : r.status == 404 ? "Not Found" : "Error";
  if (r.status == 405) reason = "Method Not Allowed";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            r.status, reason, r.content_type.c_str(), r.body.size());
  if (!r.body.empty()) mg_write(conn, r.body.data(), r.body.size());
}

}  // namespace

absl::Status MetricsServerOptions::Validate() const {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-port ", port, " must be 0..65535 (0 = any free port; -1 turns metrics off)"));
  }
  if (host.empty() || host.find_first_of(" ,:/") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-host '", host,
                     "' must be an IPv4 address or host name, e.g. 127.0.0.1 or 0.0.0.0"));
  }
  if (threads < 1 || threads > 64) return absl::InvalidArgumentError("threads must be 1..64");
  return absl::OkStatus();
}

std::string SerializeMetrics(const std::vector<std::shared_ptr<prometheus::Collectable>>& sources) {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& source : sources) {
    std::vector<prometheus::MetricFamily> more = source->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const MetricsServerOptions& options,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->collectables_ = std::move(collectables);
  mg_init_library(0);
  const std::string ports = absl::StrCat(options.host, ":", options.port);
  const std::string threads = absl::StrCat(options.threads);
  const char* config[] = {
      "listening_ports", ports.c_str(),       "num_threads", threads.c_str(), "request_timeout_ms",
      "10000",           "enable_keep_alive", "no",          nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  mg_init_data init;
  std::memset(&init, 0, sizeof(init));
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = config;
  char error_text[256] = {0};
  unsigned error_code = 0;
  mg_error_data error;
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  server->context_ = mg_start2(&init, &error);
  if (server->context_ == nullptr) {
    mg_exit_library();
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", ports, ": ", error_text[0] ? error_text : "unknown error",
        " (port in use?); choose another with --metrics-port, or 0 for any free port"));
  }
  mg_server_port bound[4];
  std::memset(bound, 0, sizeof(bound));
  const int n = mg_get_server_ports(server->context_, 4, bound);
  server->port_ = n > 0 ? bound[0].port : options.port;
  std::string host = options.host;
  if (IsWildcard(host))
    host = options.advertised_host.empty() ? HostName() : options.advertised_host;
  server->address_ = absl::StrCat(host, ":", server->port_);
  mg_set_request_handler(server->context_, "/", &MetricsServer::OnRequest, server.get());
  return server;
}

MetricsServer::~MetricsServer() {
  if (context_ != nullptr) {
    mg_stop(context_);  // waits for the handlers to return
    mg_exit_library();
  }
}

void MetricsServer::Handle(const std::string& path, HttpHandler handler) {
  absl::MutexLock lock(&mu_);
  handlers_[path] = std::move(handler);
}

std::string MetricsServer::Scrape() const { return SerializeMetrics(collectables_); }

int MetricsServer::OnRequest(mg_connection* conn, void* self) {
  return static_cast<MetricsServer*>(self)->Serve(conn);
}

int MetricsServer::Serve(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  const std::string method = info != nullptr && info->request_method ? info->request_method : "";
  const std::string path = info != nullptr && info->local_uri ? info->local_uri : "";
  HttpResponse response;
  if (method != "GET" && method != "HEAD") {
    response.status = 405;
    response.body = "only GET\n";
  } else if (path == "/metrics") {
    response.content_type = "text/plain; version=0.0.4; charset=utf-8";
    response.body = Scrape();
  } else {
    HttpHandler handler;
    {
      absl::MutexLock lock(&mu_);
      auto it = handlers_.find(path);
      if (it != handlers_.end()) handler = it->second;
    }
    if (handler) {
      response = handler();
    } else {
      response.status = 404;
      response.body = "not found; metrics are on /metrics\n";
    }
  }
  if (method == "HEAD") response.body.clear();
  WriteResponse(conn, response);
  return response.status;
}

}  // namespace mt::metrics
