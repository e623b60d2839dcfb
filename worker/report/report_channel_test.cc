// The report pipe's frames over a real pipe: round trip, end of stream, the writer without a
// pipe, and the reader's answer to damaged frames.
#include "worker/report/report_channel.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace mt::worker {
namespace {

class ReportChannelTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::pipe(fds_), 0); }
  void TearDown() override {
    if (fds_[0] >= 0) ::close(fds_[0]);
    if (fds_[1] >= 0) ::close(fds_[1]);
  }
  void CloseWriteEnd() {
    ::close(fds_[1]);
    fds_[1] = -1;
  }
  void WriteRaw(const std::string& bytes) {
    ASSERT_EQ(::write(fds_[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  int fds_[2] = {-1, -1};
};

TEST_F(ReportChannelTest, RoundTripThenEndOfStream) {
  ReportWriter writer(fds_[1]);
  EXPECT_TRUE(writer.enabled());
  mt::v1::RankReport a;
  a.set_phase(mt::v1::RANK_PHASE_TRAINING);
  a.mutable_progress()->set_step(7);
  mt::v1::RankReport b;
  b.mutable_checkpoint()->set_directory("/ckpt/iter_0000007");
  ASSERT_TRUE(writer.Write(a).ok());
  ASSERT_TRUE(writer.Write(b).ok());
  CloseWriteEnd();
  auto first = ReadReport(fds_[0]);
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->progress().step(), 7);
  auto second = ReadReport(fds_[0]);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->checkpoint().directory(), "/ckpt/iter_0000007");
  auto end = ReadReport(fds_[0]);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(end->has_value());
}

TEST_F(ReportChannelTest, WriterWithoutAPipeDropsReports) {
  ::unsetenv(kReportFdEnv);
  ReportWriter writer = ReportWriter::FromEnvironment();
  EXPECT_FALSE(writer.enabled());
  EXPECT_TRUE(writer.Write(mt::v1::RankReport()).ok());
  ::setenv(kReportFdEnv, std::to_string(fds_[1]).c_str(), 1);
  EXPECT_TRUE(ReportWriter::FromEnvironment().enabled());
  ::setenv(kReportFdEnv, "not-a-number", 1);
  EXPECT_FALSE(ReportWriter::FromEnvironment().enabled());
  ::unsetenv(kReportFdEnv);
}

TEST_F(ReportChannelTest, WriteAfterTheDaemonHasGoneIsAnError) {
  ::close(fds_[0]);
  fds_[0] = -1;
  ::signal(SIGPIPE, SIG_IGN);
  EXPECT_FALSE(ReportWriter(fds_[1]).Write(mt::v1::RankReport()).ok());
}

TEST_F(ReportChannelTest, DamagedFramesAreDataLoss) {
  WriteRaw(std::string("\x02\x00", 2));  // half a header
  CloseWriteEnd();
  EXPECT_EQ(ReadReport(fds_[0]).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(ReportChannelTest, OversizedFrameIsDataLoss) {
  WriteRaw(std::string("\xff\xff\xff\x7f", 4));
  CloseWriteEnd();
  EXPECT_EQ(ReadReport(fds_[0]).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(ReportChannelTest, TruncatedBodyIsDataLoss) {
  WriteRaw(std::string("\x05\x00\x00\x00\x28", 5));
  CloseWriteEnd();
  EXPECT_EQ(ReadReport(fds_[0]).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace mt::worker
