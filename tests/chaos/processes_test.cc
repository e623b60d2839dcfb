#include "tests/chaos/processes.h"

#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace mt::chaos {
namespace {

std::string Cmdline(const std::string& assignment) {
  return std::string("/b/bin/mt-train\0--assignment\0", 29) + assignment + std::string(1, '\0');
}

TEST(ProcessesTest, ARankCommandLineNamesItsWorkerJobAttemptAndRank) {
  const auto p =
      ParseRankCommandLine("/tmp/r", Cmdline("/tmp/r/node2-w1/j-12-a3-r1/assignment.pb"));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->worker, "node2-w1");
  EXPECT_EQ(p->job_id, "j-12");
  EXPECT_EQ(p->attempt, 3);
  EXPECT_EQ(p->rank, 1);
}

TEST(ProcessesTest, OtherCommandLinesAreNotRanks) {
  for (const std::string& c : {
           Cmdline("/elsewhere/node2-w1/j-1-a0-r0/assignment.pb"),  // another cluster
           Cmdline("/tmp/r/j-1-a0-r0/assignment.pb"),               // no worker directory
           Cmdline("/tmp/r/node2-w1/j-1-r0/assignment.pb"),         // no attempt
           Cmdline("/tmp/r/node2-w1/j-1-a0-r0/other.pb"),
           std::string("/b/bin/mt-worker\0--work_dir=/tmp/r/node2-w1\0", 44),
           std::string(),
       }) {
    EXPECT_FALSE(ParseRankCommandLine("/tmp/r", c).has_value()) << c;
  }
}

TEST(ProcessesTest, ThisProcessHasAResidentSize) {
  const auto rss = ResidentBytes(::getpid());
  ASSERT_TRUE(rss.has_value());
  EXPECT_GT(*rss, 1 << 20);
  EXPECT_FALSE(ResidentBytes(-5).has_value());
  const auto m = ReadResidentMemory(::getpid());
  ASSERT_TRUE(m.has_value());
  EXPECT_GT(m->anon, 0);
  EXPECT_GT(m->file, 0);
  // RssAnon + RssFile + RssShmem = VmRSS, sampled a moment apart.
  EXPECT_NEAR(static_cast<double>(m->anon + m->file), static_cast<double>(m->total), 1 << 20);
  EXPECT_FALSE(ReadResidentMemory(-5).has_value());
}

}  // namespace
}  // namespace mt::chaos
