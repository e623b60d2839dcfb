#include "common/metrics/metrics_server.h"

#include <memory>
#include <string>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "tests/testutil/certs.h"
#include "tests/testutil/http.h"
#include "tests/testutil/subprocess.h"

namespace mt::metrics {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

MetricsServerOptions Options(const std::string& host, int port) {
  MetricsServerOptions o;
  o.host = host;
  o.port = port;
  return o;
}

TEST(MetricsServerTest, ServesTheRegistryOnMetricsAndHandlersOnTheirPaths) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter()
                     .Name("mt_test_events_total")
                     .Help("Events seen by the test.")
                     .Register(*registry);
  family.Add({{"kind", "a"}}).Increment(3);
  MT_ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start(Options("127.0.0.1", 0), {registry}));
  ASSERT_GT(server->port(), 0);
  EXPECT_EQ(server->address(), "127.0.0.1:" + std::to_string(server->port()));

  MT_ASSERT_OK_AND_ASSIGN(testutil::HttpResult r, testutil::HttpGet(server->address(), "/metrics"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_THAT(r.body, HasSubstr("# HELP mt_test_events_total Events seen by the test.\n"));
  EXPECT_THAT(r.body, HasSubstr("# TYPE mt_test_events_total counter\n"));
  EXPECT_THAT(r.body, HasSubstr("mt_test_events_total{kind=\"a\"} 3\n"));

  // A value set after the first scrape shows in the next one.
  family.Add({{"kind", "a"}}).Increment(2);
  MT_ASSERT_OK_AND_ASSIGN(r, testutil::HttpGet(server->address(), "/metrics"));
  EXPECT_THAT(r.body, HasSubstr("mt_test_events_total{kind=\"a\"} 5\n"));

  server->Handle("/sd", [] {
    HttpResponse resp;
    resp.content_type = "application/json";
    resp.body = "[]";
    return resp;
  });
  MT_ASSERT_OK_AND_ASSIGN(r, testutil::HttpGet(server->address(), "/sd"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, "[]");
  MT_ASSERT_OK_AND_ASSIGN(r, testutil::HttpGet(server->address(), "/nothing"));
  EXPECT_EQ(r.status, 404);
  EXPECT_THAT(r.body, HasSubstr("/metrics"));
}

TEST(MetricsServerTest, SeveralCollectablesAreServedInOrder) {
  auto first = std::make_shared<prometheus::Registry>();
  auto second = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge().Name("mt_test_first").Help("First.").Register(*first).Add({}).Set(1);
  prometheus::BuildGauge().Name("mt_test_second").Help("Second.").Register(*second).Add({}).Set(2);
  const std::string text = SerializeMetrics({first, second});
  const size_t a = text.find("mt_test_first 1");
  const size_t b = text.find("mt_test_second 2");
  ASSERT_NE(a, std::string::npos) << text;
  ASSERT_NE(b, std::string::npos) << text;
  EXPECT_LT(a, b);
}

TEST(MetricsServerTest, APortInUseIsAClearErrorNamingTheFlag) {
  auto registry = std::make_shared<prometheus::Registry>();
  MT_ASSERT_OK_AND_ASSIGN(auto first, MetricsServer::Start(Options("127.0.0.1", 0), {registry}));
  auto second = MetricsServer::Start(Options("127.0.0.1", first->port()), {registry});
  EXPECT_THAT(second.status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("--metrics-port")));
}

TEST(MetricsServerTest, BadOptionsNameTheFlag) {
  EXPECT_THAT(MetricsServer::Start(Options("127.0.0.1", 70000), {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--metrics-port 70000")));
  EXPECT_THAT(MetricsServer::Start(Options("127.0.0.1:80", 0), {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--metrics-host")));
}

TEST(MetricsServerTest, AWildcardBindIsAdvertisedUnderAHostName) {
  MetricsServerOptions options;
  options.host = "0.0.0.0";
  options.advertised_host = "node7";
  MT_ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start(options, {}));
  EXPECT_EQ(server->address(), "node7:" + std::to_string(server->port()));
  // Reachable over loopback all the same.
  MT_ASSERT_OK_AND_ASSIGN(
      testutil::HttpResult r,
      testutil::HttpGet("127.0.0.1:" + std::to_string(server->port()), "/metrics"));
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(r.body, Not(HasSubstr("mt_")));
}

// HTTPS with certificates made by openssl here: a client that trusts the CA gets the metrics,
// one that trusts another CA fails the handshake, and plain HTTP gets no metrics from it.
TEST(MetricsServerTest, ServesHttpsWithTheGivenCertificate) {
  auto certs = testutil::MakeTestCerts(testutil::MakeTempDir("metrics_tls"));
  if (!certs.ok()) GTEST_SKIP() << "openssl cannot make test certificates: " << certs.status();
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge().Name("mt_test_tls").Help("TLS.").Register(*registry).Add({}).Set(7);
  MetricsServerOptions options = Options("127.0.0.1", 0);
  options.tls_cert = certs->server_cert;
  options.tls_key = certs->server_key;
  MT_ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start(options, {registry}));
  EXPECT_EQ(server->Url("/metrics"), "https://" + server->address() + "/metrics");
  testutil::HttpGetOptions get;
  get.tls_ca = certs->ca;
  MT_ASSERT_OK_AND_ASSIGN(testutil::HttpResult r,
                          testutil::HttpGet(server->address(), "/metrics", get));
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(r.body, HasSubstr("mt_test_tls 7\n"));
  get.tls_ca = certs->other_ca;
  EXPECT_THAT(testutil::HttpGet(server->address(), "/metrics", get).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("TLS handshake")));
  absl::StatusOr<testutil::HttpResult> plain =
      testutil::HttpGet(server->address(), "/metrics", absl::Seconds(5));
  if (plain.ok()) {
    EXPECT_NE(plain->status, 200);
    EXPECT_THAT(plain->body, Not(HasSubstr("mt_test_tls")));
  }
  // The failed handshakes cost nothing: the next scrape (and a HEAD) is served.
  get.tls_ca = certs->ca;
  MT_ASSERT_OK_AND_ASSIGN(r, testutil::HttpGet(server->address(), "/metrics", get));
  EXPECT_EQ(r.status, 200);
  MT_ASSERT_OK_AND_ASSIGN(r, testutil::HttpGet(server->address(), "/nothing", get));
  EXPECT_EQ(r.status, 404);
}

TEST(MetricsServerTest, RequestHeadsAreParsedStrictly) {
  HttpRequestLine r;
  ASSERT_TRUE(ParseRequestHead(
      "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nauthorization:  Bearer t0k  \r\nAccept: */*", &r));
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.path, "/metrics");
  EXPECT_EQ(r.authorization, "Bearer t0k");
  ASSERT_TRUE(ParseRequestHead("HEAD /sd HTTP/1.0", &r));
  EXPECT_EQ(r.authorization, "");
  for (const char* bad :
       {"", "GET", "GET /metrics", "GET metrics HTTP/1.1", "GET / HTTP/2", "GET  / HTTP/1.1",
        "GET / HTTP/1.1\r\nno colon here", "GET / HTTP/1.1\r\n: empty name"}) {
    EXPECT_FALSE(ParseRequestHead(bad, &r)) << bad;
  }
}

TEST(MetricsServerTest, BadTlsFilesNameTheirFlag) {
  auto certs = testutil::MakeTestCerts(testutil::MakeTempDir("metrics_tls_bad"));
  if (!certs.ok()) GTEST_SKIP() << "openssl cannot make test certificates: " << certs.status();
  MetricsServerOptions options = Options("127.0.0.1", 0);
  options.tls_cert = certs->server_cert;
  EXPECT_THAT(MetricsServer::Start(options, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("go together")));
  options.tls_key = "/nonexistent/key.pem";
  EXPECT_THAT(MetricsServer::Start(options, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--metrics-tls-key /nonexistent/key.pem: cannot read")));
  options.tls_key = certs->client_key;  // a key, but not the certificate's
  EXPECT_THAT(MetricsServer::Start(options, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--metrics-tls-key")));
  options.tls_cert = certs->server_key;  // not a certificate
  options.tls_key = certs->server_key;
  EXPECT_THAT(MetricsServer::Start(options, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--metrics-tls-cert")));
}

// With a bearer token every path wants it: none or a wrong one gets 401 and no metrics.
TEST(MetricsServerTest, ATokenGuardsEveryPath) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge().Name("mt_test_guarded").Help("G.").Register(*registry).Add({}).Set(1);
  MetricsServerOptions options = Options("127.0.0.1", 0);
  options.bearer_token = "metrics-token-0123456789abcdef";
  MT_ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start(options, {registry}));
  server->Handle("/sd", [] { return HttpResponse{200, "application/json", "[]"}; });
  for (const char* path : {"/metrics", "/sd"}) {
    SCOPED_TRACE(path);
    MT_ASSERT_OK_AND_ASSIGN(testutil::HttpResult r, testutil::HttpGet(server->address(), path));
    EXPECT_EQ(r.status, 401);
    EXPECT_THAT(r.www_authenticate, HasSubstr("Bearer"));
    EXPECT_THAT(r.body, Not(HasSubstr("mt_test_guarded")));
    testutil::HttpGetOptions get;
    for (const char* wrong : {"metrics-token-0123456789abcdeX", "metrics-token", "x"}) {
      get.bearer_token = wrong;
      MT_ASSERT_OK_AND_ASSIGN(r, testutil::HttpGet(server->address(), path, get));
      EXPECT_EQ(r.status, 401) << wrong;
    }
    get.bearer_token = options.bearer_token;
    MT_ASSERT_OK_AND_ASSIGN(r, testutil::HttpGet(server->address(), path, get));
    EXPECT_EQ(r.status, 200);
    if (std::string(path) == "/metrics") {
      EXPECT_THAT(r.body, HasSubstr("mt_test_guarded 1\n"));
    }
  }
}

TEST(MetricsServerTest, OffLoopbackNeedsATokenOrMetricsPublic) {
  for (const char* host : {"127.0.0.1", "127.8.9.10", "::1", "localhost"}) {
    EXPECT_TRUE(CheckMetricsExposure(host, false, false, "/metrics").ok()) << host;
  }
  for (const char* host : {"0.0.0.0", "10.0.0.5", "::", "node7"}) {
    EXPECT_THAT(
        CheckMetricsExposure(host, false, false, "/metrics and /sd"),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 ::testing::AllOf(HasSubstr(std::string("--metrics-host ") + host),
                                  HasSubstr("/metrics and /sd"), HasSubstr("--metrics-token-file"),
                                  HasSubstr("--metrics-public"))))
        << host;
    EXPECT_TRUE(CheckMetricsExposure(host, true, false, "/metrics").ok()) << host;
    EXPECT_TRUE(CheckMetricsExposure(host, false, true, "/metrics").ok()) << host;
  }
}

}  // namespace
}  // namespace mt::metrics
