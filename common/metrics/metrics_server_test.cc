#include "common/metrics/metrics_server.h"

#include <memory>
#include <string>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "tests/testutil/http.h"

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

}  // namespace
}  // namespace mt::metrics
