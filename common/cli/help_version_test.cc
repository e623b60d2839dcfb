#include "common/cli/help_version.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt::cli {
namespace {

// Runs AnswerHelpOrVersion on `args` (argv[0] = "tool"); what it printed goes to *out.
bool Answer(std::vector<std::string> args, std::string* out) {
  args.insert(args.begin(), "tool");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStdout();
  const bool answered =
      AnswerHelpOrVersion(static_cast<int>(argv.size()), argv.data(), "tool", "usage: tool X");
  *out = ::testing::internal::GetCapturedStdout();
  return answered;
}

TEST(HelpVersionTest, HelpAndVersionAreAnsweredOnStdout) {
  std::string out;
  EXPECT_TRUE(Answer({"--help"}, &out));
  EXPECT_EQ(out, "usage: tool X\n");
  EXPECT_TRUE(Answer({"--size", "124m", "-h"}, &out));
  EXPECT_EQ(out, "usage: tool X\n");
  EXPECT_TRUE(Answer({"--version"}, &out));
  EXPECT_EQ(out, "tool 0.1.0 (API mt.v1)\n");
  EXPECT_EQ(VersionLine("tool"), "tool 0.1.0 (API mt.v1)");
}

TEST(HelpVersionTest, OtherArgumentsAndAnythingAfterADoubleDashAreLeftAlone) {
  std::string out;
  EXPECT_FALSE(Answer({}, &out));
  EXPECT_FALSE(Answer({"--size", "124m", "/tmp/dir"}, &out));
  EXPECT_FALSE(Answer({"--", "--help"}, &out));
  EXPECT_FALSE(Answer({"--helpful", "--versions"}, &out));
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace mt::cli
