// The exact strings mtctl prints for sizes, durations, rates, counts and states (format.h).
#include "client/format.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace mt::client {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(FormatTest, BinaryBytes) {
  const std::vector<std::pair<int64_t, std::string>> cases = {
      {0, "0 B"},
      {1023, "1023 B"},
      {1024, "1.0 KiB"},
      {1536, "1.5 KiB"},
      {1 << 20, "1.0 MiB"},
      {(int64_t{3} << 30) / 2, "1.50 GiB"},
      {int64_t{5} << 40, "5120.00 GiB"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(BinaryBytes(in), want) << in;
}

TEST(FormatTest, DecimalBytes) {
  const std::vector<std::pair<double, std::string>> cases = {
      {0, "0 B"},        {999, "999 B"},       {1000, "1.0 kB"},       {1550, "1.6 kB"},
      {2.5e6, "2.5 MB"}, {1.234e9, "1.23 GB"}, {12e12, "12000.00 GB"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(DecimalBytes(in), want) << in;
}

TEST(FormatTest, CompactBytesAndGib) {
  const std::vector<std::pair<int64_t, std::string>> cases = {
      {-1, "-"},
      {0, "-"},
      {1 << 20, "1M"},
      {int64_t{512} << 20, "512M"},
      {int64_t{3} << 29, "1.5G"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(CompactBytes(in), want) << in;
  EXPECT_EQ(Gib(0), "0.0 GiB");
  EXPECT_EQ(Gib(int64_t{80} << 30), "80.0 GiB");
}

TEST(FormatTest, EtaAndClockDuration) {
  const std::vector<std::pair<double, std::string>> eta = {
      {0, "0"}, {59.9, "59s"}, {61, "1m1s"}, {3723, "1h2m3s"}, {-1, "-"}, {kNaN, "-"}, {kInf, "-"},
  };
  for (const auto& [in, want] : eta) EXPECT_EQ(Eta(in), want) << in;
  const std::vector<std::pair<double, std::string>> clock = {
      {0, "0:00"},     {59.4, "0:59"},    {59.6, "1:00"},
      {3599, "59:59"}, {3600, "1:00:00"}, {36000 + 62, "10:01:02"},
      {-1, "?"},       {kNaN, "?"},       {kInf, "?"},
  };
  for (const auto& [in, want] : clock) EXPECT_EQ(ClockDuration(in), want) << in;
}

TEST(FormatTest, EtaOrStallShowsTheStallInsteadOfAFrozenEta) {
  mt::v1::Progress p;
  p.set_eta_seconds(61);
  EXPECT_EQ(EtaOrStall(p), "1m1s");
  p.set_no_progress_seconds(17.9);
  EXPECT_EQ(EtaOrStall(p), "no progress for 17 s");
}

TEST(FormatTest, RatesAndCounts) {
  const std::vector<std::pair<double, std::string>> rate = {
      {0, "0 tok/s"},           {999, "999 tok/s"},     {1000, "1.0K tok/s"},
      {374200, "374.2K tok/s"}, {1.5e6, "1.50M tok/s"},
  };
  for (const auto& [in, want] : rate) EXPECT_EQ(TokenRate(in), want) << in;
  EXPECT_EQ(ScaledCount(12345, "k"), "12.3k");
  EXPECT_EQ(ScaledCount(12), "12");
  const std::vector<std::pair<int64_t, std::string>> thousands = {
      {0, "0"}, {999, "999"}, {1000, "1,000"}, {1234567, "1,234,567"}, {-1234, "-1,234"},
  };
  for (const auto& [in, want] : thousands) EXPECT_EQ(Thousands(in), want) << in;
}

TEST(FormatTest, Numbers) {
  EXPECT_EQ(Number(2.5), "2.5000");
  EXPECT_EQ(Number(kNaN), "-");
  EXPECT_EQ(Number(kInf), "inf");  // a diverged loss shows as such in describe/watch
  EXPECT_EQ(Number(3.14159, "%.1f"), "3.1");
  EXPECT_EQ(FiniteNumber(kInf, "%.4f"), "-");
  EXPECT_EQ(FiniteNumber(kNaN, "%.4f"), "-");
  EXPECT_EQ(FiniteNumber(42.5, "%.1f%%"), "42.5%");
}

TEST(FormatTest, StateNamesLoseTheirTypePrefix) {
  EXPECT_EQ(StateName(mt::v1::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(StateName(mt::v1::WORKER_STATE_IDLE), "IDLE");
  EXPECT_EQ(StateName(mt::v1::CHECKPOINT_STATE_COMPLETE), "COMPLETE");
  EXPECT_EQ(StripPrefix("OTHER_NAME", "JOB_STATE_"), "OTHER_NAME");
}

TEST(FormatTest, TimesAndAges) {
  google::protobuf::Timestamp unset;
  EXPECT_EQ(LocalTime(unset), "-");
  EXPECT_EQ(SecondsAgo(unset, absl::Now()), "-");
  google::protobuf::Timestamp t;
  t.set_seconds(1000);
  EXPECT_EQ(SecondsAgo(t, absl::FromUnixSeconds(1002) + absl::Milliseconds(500)), "2.5s");
  EXPECT_EQ(SecondsAgo(t, absl::FromUnixSeconds(1001), " ago"), "1.0s ago");
  EXPECT_EQ(LocalTime(t).size(), std::string("1970-01-01 00:16:40").size());
}

TEST(FormatTest, Bar) {
  EXPECT_EQ(Bar(0, 4), "[....]");
  EXPECT_EQ(Bar(0.5, 4), "[##..]");
  EXPECT_EQ(Bar(0.99, 4), "[###.]");
  EXPECT_EQ(Bar(1, 4), "[####]");
  EXPECT_EQ(Bar(7, 4), "[####]");
  EXPECT_EQ(Bar(-1, 4), "[....]");
}

}  // namespace
}  // namespace mt::client
