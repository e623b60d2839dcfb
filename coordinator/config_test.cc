#include "coordinator/config.h"

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

CoordinatorConfig Valid() {
  CoordinatorConfig c;
  c.state_dir = "/var/lib/mt";
  return c;
}

TEST(CoordinatorConfig, DefaultsAreValidAndLoopback) {
  CoordinatorConfig c = Valid();
  EXPECT_THAT(c.Validate(), IsOk());
  c.state_dir.clear();
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--state-dir")));
  c = Valid();
  EXPECT_EQ(c.listen_address, "127.0.0.1:7070");
}

TEST(CoordinatorConfig, NonLoopbackNeedsTokens) {
  CoordinatorConfig c = Valid();
  c.listen_address = "0.0.0.0:7070";
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("requires --auth-token-file")));
  c.auth_token_file = "/etc/mt/tokens";
  c.allowed_roots = {"/data"};
  // Tokens alone would cross the network in clear text: TLS, or an explicit opt-out.
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("give --tls-cert and --tls-key")));
  c.insecure_allow_plaintext = true;
  EXPECT_THAT(c.Validate(), IsOk());
  c.insecure_allow_plaintext = false;
  c.tls = {"/etc/mt/server.pem", "/etc/mt/server.key", ""};
  EXPECT_THAT(c.Validate(), IsOk());
  EXPECT_FALSE(c.ReflectionEnabled());
  c.tls.key.clear();
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls-cert and --tls-key")));
}

TEST(CoordinatorConfig, NonLoopbackNeedsAllowedRoots) {
  CoordinatorConfig c = Valid();
  c.listen_address = "0.0.0.0:7070";
  c.auth_token_file = "/etc/mt/tokens";
  c.insecure_allow_plaintext = true;
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("requires --allowed-root DIR")));
  c.allowed_roots = {"/data", "/shared"};
  EXPECT_THAT(c.Validate(), IsOk());
  c = Valid();  // loopback: confinement is optional
  EXPECT_THAT(c.Validate(), IsOk());
}

TEST(CoordinatorConfig, ReflectionAndMetricsExposure) {
  CoordinatorConfig c = Valid();
  EXPECT_TRUE(c.ReflectionEnabled());  // loopback: grpcurl works out of the box
  c.reflection = "off";
  EXPECT_FALSE(c.ReflectionEnabled());
  c.reflection = "maybe";
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--reflection")));
  c = Valid();
  c.metrics_port = 9400;
  c.metrics_host = "0.0.0.0";
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--metrics-public")));
  c.metrics_public = true;
  EXPECT_THAT(c.Validate(), IsOk());
  c.metrics_public = false;
  c.metrics_token_file = "/etc/mt/metrics.token";  // a token is required instead
  EXPECT_THAT(c.Validate(), IsOk());
  c.metrics_token_file.clear();
  c.metrics_port = -1;  // off: nothing exposed
  EXPECT_THAT(c.Validate(), IsOk());
}

TEST(CoordinatorConfig, TimingLimits) {
  CoordinatorConfig c = Valid();
  c.lost_after = absl::Seconds(1);
  c.heartbeat_interval = absl::Seconds(1);
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--lost-after")));
  c = Valid();
  c.heartbeat_interval = absl::Milliseconds(1);
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--heartbeat-interval")));
  c = Valid();
  c.keep_ended_jobs = -1;
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--keep-ended-jobs -1")));
  c = Valid();
  c.ended_job_ttl = absl::Seconds(-1);
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--ended-job-ttl")));
  c = Valid();
  c.listen_address = "nocolon";
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host:port")));
}

}  // namespace
}  // namespace mt::coordinator

namespace mt::coordinator {
namespace {

TEST(CoordinatorConfig, AdvertiseAddressIsChecked) {
  CoordinatorConfig c = Valid();
  c.advertise_address = "10.0.0.1/24";
  EXPECT_THAT(c.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--advertise-address")));
  c.advertise_address = "coord.example:7070";
  EXPECT_THAT(c.Validate(), IsOk());
}

TEST(AdvertisedAddressTest, FlagThenListenThenHostName) {
  CoordinatorConfig c = Valid();
  c.listen_address = "10.77.0.1:0";
  EXPECT_EQ(AdvertisedAddress(c, 41000, "node1"), "10.77.0.1:41000");
  c.listen_address = "0.0.0.0:7070";
  EXPECT_EQ(AdvertisedAddress(c, 7070, "node1"), "node1:7070");
  c.listen_address = "[::]:7070";
  EXPECT_EQ(AdvertisedAddress(c, 7070, "node1"), "node1:7070");
  c.listen_address = "[fd00::1]:7070";
  EXPECT_EQ(AdvertisedAddress(c, 7070, "node1"), "[fd00::1]:7070");
  c.advertise_address = "203.0.113.9";
  EXPECT_EQ(AdvertisedAddress(c, 7070, "node1"), "203.0.113.9:7070");
  c.advertise_address = "203.0.113.9:17070";
  EXPECT_EQ(AdvertisedAddress(c, 7070, "node1"), "203.0.113.9:17070");
  c.advertise_address = "[fd00::9]";
  EXPECT_EQ(AdvertisedAddress(c, 7070, "node1"), "[fd00::9]:7070");
  c.advertise_address = "fd00::9";
  EXPECT_EQ(AdvertisedAddress(c, 7070, "node1"), "[fd00::9]:7070");
}

}  // namespace
}  // namespace mt::coordinator
