// The built mt-train binary answers --help and --version (exit 0).
#include <string>

#include "common/base/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::train {
namespace {

using ::testing::HasSubstr;

TEST(TrainBinaryTest, AnswersVersion) {
  auto r = testutil::RunCommand({MT_TRAIN_BINARY, "--version"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_THAT(r->out, HasSubstr(std::string("mt-train ") + kVersion + " (API "));
}

TEST(TrainBinaryTest, AnswersHelp) {
  auto r = testutil::RunCommand({MT_TRAIN_BINARY, "--help"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_THAT(r->out, HasSubstr("usage: mt-worker train"));
  EXPECT_THAT(r->out, HasSubstr("mt-train --assignment FILE"));
  EXPECT_THAT(r->out, HasSubstr("usage: mt-worker generate CHECKPOINT"));
  EXPECT_THAT(r->out, HasSubstr("usage: mt-worker eval CHECKPOINT"));
}

TEST(TrainBinaryTest, GenerateAndEvalAnswerHelpAndRefuseBadInput) {
  for (const char* verb : {"generate", "eval"}) {
    auto r = testutil::RunCommand({MT_TRAIN_BINARY, verb, "--help"});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 0) << r->err;
    EXPECT_THAT(r->out, HasSubstr(std::string("usage: mt-worker ") + verb)) << verb;
    r = testutil::RunCommand({MT_TRAIN_BINARY, verb, "/nonexistent/ckpt", "--bogus", "1"});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 2) << verb;
    EXPECT_THAT(r->err, HasSubstr("unknown flag \"--bogus\"")) << verb;
  }
}

}  // namespace
}  // namespace mt::train
