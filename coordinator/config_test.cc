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
