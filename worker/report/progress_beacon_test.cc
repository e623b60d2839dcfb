// The progress beacon over a real pipe: changes coalesce into one frame with the latest
// activity, nothing is sent without a change, the thread sends by itself within its period,
// compute times ride along, and destruction flushes what is pending.
#include "worker/report/progress_beacon.h"

#include <poll.h>
#include <unistd.h>

#include <cmath>
#include <optional>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::worker {
namespace {

using ::testing::ElementsAre;

class ProgressBeaconTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::pipe(fds_), 0); }
  void TearDown() override {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  // The next frame, or nullopt when none arrives within `wait`.
  std::optional<mt::v1::RankReport> Next(absl::Duration wait = absl::Seconds(5)) {
    pollfd p{fds_[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(wait))) <= 0) return std::nullopt;
    auto r = ReadReport(fds_[0]);
    if (!r.ok() || !r->has_value()) return std::nullopt;
    return **r;
  }
  int fds_[2] = {-1, -1};
};

TEST_F(ProgressBeaconTest, ChangesCoalesceIntoOneFrameWithTheLatestActivity) {
  ProgressBeacon beacon(ReportWriter(fds_[1]), absl::Hours(1));  // the thread never fires
  beacon.Set(mt::v1::RANK_ACTIVITY_DATA, 7);
  beacon.Set(mt::v1::RANK_ACTIVITY_FORWARD, 7);
  beacon.Set(mt::v1::RANK_ACTIVITY_BACKWARD, 7);
  beacon.AddComputeSeconds(0.5);
  beacon.AddComputeSeconds(std::nan(""));  // dropped
  beacon.AddComputeSeconds(-1);            // dropped
  beacon.AddComputeSeconds(0.25);
  beacon.Flush();
  beacon.Flush();  // nothing changed: no frame
  EXPECT_EQ(beacon.frames(), 1);
  auto r = Next();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->activity(), mt::v1::RANK_ACTIVITY_BACKWARD);
  EXPECT_EQ(r->activity_step(), 7);
  EXPECT_THAT(r->step_compute_seconds(), ElementsAre(0.5, 0.25));
  EXPECT_FALSE(Next(absl::Milliseconds(100)).has_value());
}

TEST_F(ProgressBeaconTest, TheThreadSendsWithinItsPeriodAndOnlyOnChange) {
  ProgressBeacon beacon(ReportWriter(fds_[1]), absl::Milliseconds(20));
  beacon.Set(mt::v1::RANK_ACTIVITY_OPTIMIZER, 123456789012);
  auto r = Next();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->activity(), mt::v1::RANK_ACTIVITY_OPTIMIZER);
  EXPECT_EQ(r->activity_step(), 123456789012);
  EXPECT_TRUE(r->step_compute_seconds().empty());
  // No change for ten periods: no frame.
  EXPECT_FALSE(Next(absl::Milliseconds(200)).has_value());
  EXPECT_EQ(beacon.frames(), 1);
  beacon.Set(mt::v1::RANK_ACTIVITY_SAVE, 123456789013);
  r = Next();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->activity(), mt::v1::RANK_ACTIVITY_SAVE);
}

TEST_F(ProgressBeaconTest, DestructionFlushesWhatIsPending) {
  {
    ProgressBeacon beacon(ReportWriter(fds_[1]), absl::Hours(1));
    beacon.Set(mt::v1::RANK_ACTIVITY_EVAL, 40);
  }
  auto r = Next();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->activity(), mt::v1::RANK_ACTIVITY_EVAL);
  EXPECT_EQ(r->activity_step(), 40);
}

TEST_F(ProgressBeaconTest, WithoutAPipeNothingIsWrittenAndNothingBlocks) {
  ProgressBeacon beacon(ReportWriter(-1), absl::Milliseconds(1));
  beacon.Set(mt::v1::RANK_ACTIVITY_DATA, 1);
  beacon.Flush();
  EXPECT_EQ(beacon.frames(), 0);
}

}  // namespace
}  // namespace mt::worker
