// mtctl's entry (verbs.h): --help and --version answer with exit 0, mistakes with exit 2.
#include "client/verbs.h"

#include <string>
#include <vector>

#include "client/common.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::client {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Runs mtctl's Main on `args` (argv[0] added); returns the exit code, stdout in *out.
int RunMain(std::vector<std::string> args, std::string* out) {
  args.insert(args.begin(), "mtctl");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::testing::internal::CaptureStdout();
  const int code = Main(static_cast<int>(args.size()), argv.data());
  *out = ::testing::internal::GetCapturedStdout();
  return code;
}

TEST(VerbsTest, HelpListsEveryVerb) {
  std::string out;
  EXPECT_EQ(RunMain({"--help"}, &out), kExitOk);
  for (const Verb& v : AllVerbs()) EXPECT_THAT(out, HasSubstr(v.name));
  EXPECT_THAT(out, HasSubstr("Exit codes"));
}

TEST(VerbsTest, VersionExitsZero) {
  std::string out;
  EXPECT_EQ(RunMain({"--version"}, &out), kExitOk);
  EXPECT_THAT(out, StartsWith("mtctl "));
}

TEST(VerbsTest, VerbHelpShowsItsUsage) {
  std::string out;
  EXPECT_EQ(RunMain({"cancel", "--help"}, &out), kExitOk);
  EXPECT_THAT(out, HasSubstr("usage: mtctl cancel JOB_ID [REASON]"));
  EXPECT_EQ(RunMain({"data", "--help"}, &out), kExitOk);
  EXPECT_THAT(out, HasSubstr("mtctl data SUBCOMMAND"));
}

TEST(VerbsTest, NoVerbOrAnUnknownOneIsUsage) {
  std::string out;
  EXPECT_EQ(RunMain({}, &out), kExitUsage);
  EXPECT_EQ(RunMain({"frobnicate"}, &out), kExitUsage);
  EXPECT_EQ(RunMain({"data"}, &out), kExitUsage);
  EXPECT_EQ(RunMain({"data", "frobnicate"}, &out), kExitUsage);
}

TEST(Verbs, ConnectionFlagsAreKnownInEveryForm) {
  bool takes_value = false;
  for (const char* flag : {"--coordinator", "--token-file", "--token_file", "--tls-ca", "--tls_ca",
                           "--tls-cert", "--tls_cert", "--tls-key", "--tls_key"}) {
    EXPECT_TRUE(IsConnectionFlag(flag, &takes_value)) << flag;
    EXPECT_TRUE(takes_value) << flag;
    EXPECT_TRUE(IsConnectionFlag(std::string(flag) + "=x", &takes_value)) << flag;
    EXPECT_FALSE(takes_value) << flag;
  }
  EXPECT_TRUE(IsConnectionFlag("--insecure-allow-plaintext", &takes_value));
  EXPECT_FALSE(takes_value);
  EXPECT_FALSE(IsConnectionFlag("--tls-cafile", &takes_value));
  EXPECT_FALSE(IsConnectionFlag("-o", &takes_value));
  EXPECT_FALSE(IsConnectionFlag("tls-ca", &takes_value));
  // A connection flag's value before the verb is not taken for the verb.
  std::string out;
  EXPECT_EQ(RunMain({"--tls-ca", "frobnicate", "--help"}, &out), kExitOk);
}

TEST(VerbsTest, AnUnknownFlagOrABadValueIsUsage) {
  std::string out;
  // absl::ParseCommandLine would exit(1) here, ending this test with the wrong code.
  EXPECT_EQ(RunMain({"list", "--bogus"}, &out), kExitUsage);
  EXPECT_EQ(RunMain({"list", "--state=foo"}, &out), kExitUsage);
  EXPECT_EQ(RunMain({"delete", "--nobogus", "j-1"}, &out), kExitUsage);
}

}  // namespace
}  // namespace mt::client
