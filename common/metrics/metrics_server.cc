#include "common/metrics/metrics_server.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "civetweb.h"
#include "common/metrics/tls_listener.h"
#include "common/net/address.h"
#include "openssl/crypto.h"
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

// The whole HTTP response: status line, headers, body (empty for HEAD: `head`).
std::string FormatResponse(const HttpResponse& r, bool head) {
  const char* reason = r.status == 200 ? "OK" : r.status == 404 ? "Not Found" : "Error";
  if (r.status == 405) reason = "Method Not Allowed";
  if (r.status == 401) reason = "Unauthorized";
  return absl::StrCat("HTTP/1.1 ", r.status, " ", reason, "\r\nContent-Type: ", r.content_type,
                      "\r\nContent-Length: ", head ? 0 : r.body.size(), "\r\n",
                      r.status == 401 ? "WWW-Authenticate: Bearer realm=\"mt\"\r\n" : "",
                      "Cache-Control: no-store\r\nConnection: close\r\n\r\n", head ? "" : r.body);
}

// A file the daemon must read, named by its flag.
absl::Status CheckReadable(const std::string& path, absl::string_view flag) {
  if (::access(path.c_str(), R_OK) == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " ", path, ": cannot read it: ", std::strerror(errno)));
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  absl::StatusOr<net::IpAddress> ip = net::ParseIp(host);
  return ip.ok() && ip->is_loopback();
}

}  // namespace

absl::Status CheckMetricsExposure(const std::string& host, bool has_token, bool metrics_public,
                                  absl::string_view paths) {
  if (IsLoopbackHost(host) || has_token || metrics_public) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--metrics-host ", host, " is not a loopback address and ", paths,
      " would answer anyone who reaches it: give --metrics-token-file (Prometheus then sends "
      "that bearer token) or --metrics-public to serve them to the network anyway"));
}

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
  if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--metrics-tls-cert and --metrics-tls-key go together: give both for HTTPS, or neither");
  }
  if (!tls_cert.empty()) {
    if (absl::Status s = CheckReadable(tls_cert, "--metrics-tls-cert"); !s.ok()) return s;
    if (absl::Status s = CheckReadable(tls_key, "--metrics-tls-key"); !s.ok()) return s;
  }
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
  server->bearer_token_ = options.bearer_token;
  if (!options.tls_cert.empty()) {
    absl::StatusOr<std::unique_ptr<TlsListener>> tls = TlsListener::Start(
        options.host, options.port, options.tls_cert, options.tls_key, options.threads,
        [raw = server.get()](const HttpRequestLine& request) {
          return FormatResponse(raw->Respond(request.method, request.path, request.authorization),
                                request.method == "HEAD");
        });
    if (!tls.ok()) return tls.status();
    server->tls_ = *std::move(tls);
    server->Advertise(options, server->tls_->port());
    return server;
  }
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
  server->Advertise(options, n > 0 ? bound[0].port : options.port);
  mg_set_request_handler(server->context_, "/", &MetricsServer::OnRequest, server.get());
  return server;
}

void MetricsServer::Advertise(const MetricsServerOptions& options, int port) {
  port_ = port;
  std::string host = options.host;
  if (IsWildcard(host))
    host = options.advertised_host.empty() ? HostName() : options.advertised_host;
  address_ = absl::StrCat(host, ":", port_);
}

MetricsServer::~MetricsServer() {
  tls_.reset();  // joins its threads, which call Respond
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

std::string MetricsServer::Url(absl::string_view path) const {
  return absl::StrCat(tls_ != nullptr ? "https://" : "http://", address_, path);
}

bool MetricsServer::Authorized(absl::string_view authorization) const {
  if (bearer_token_.empty()) return true;
  absl::string_view presented = authorization;
  if (!absl::ConsumePrefix(&presented, "Bearer ")) return false;
  return presented.size() == bearer_token_.size() &&
         CRYPTO_memcmp(presented.data(), bearer_token_.data(), presented.size()) == 0;
}

int MetricsServer::OnRequest(mg_connection* conn, void* self) {
  return static_cast<MetricsServer*>(self)->Serve(conn);
}

int MetricsServer::Serve(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  const std::string method = info != nullptr && info->request_method ? info->request_method : "";
  const std::string path = info != nullptr && info->local_uri ? info->local_uri : "";
  const char* authorization = mg_get_header(conn, "Authorization");
  const HttpResponse response =
      Respond(method, path, authorization != nullptr ? authorization : "");
  const std::string bytes = FormatResponse(response, method == "HEAD");
  mg_write(conn, bytes.data(), bytes.size());
  return response.status;
}

HttpResponse MetricsServer::Respond(absl::string_view method, absl::string_view path,
                                    absl::string_view authorization) {
  HttpResponse response;
  if (!Authorized(authorization)) {
    response.status = 401;
    response.body = "this endpoint wants a bearer token: Authorization: Bearer TOKEN\n";
  } else if (method != "GET" && method != "HEAD") {
    response.status = 405;
    response.body = "only GET\n";
  } else if (path == "/metrics") {
    response.content_type = "text/plain; version=0.0.4; charset=utf-8";
    response.body = Scrape();
  } else {
    HttpHandler handler;
    {
      absl::MutexLock lock(&mu_);
      auto it = handlers_.find(std::string(path));
      if (it != handlers_.end()) handler = it->second;
    }
    if (handler) {
      response = handler();
    } else {
      response.status = 404;
      response.body = "not found; metrics are on /metrics\n";
    }
  }
  return response;
}

}  // namespace mt::metrics
