#include "coordinator/jobs/save_dir.h"

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

TEST(SaveDirTest, NormalizeDirIsLexical) {
  const struct {
    const char* in;
    const char* want;
  } cases[] = {
      {"", ""},           {"/", "/"},         {"/a/b", "/a/b"},
      {"/a//b/", "/a/b"}, {"/a/./b", "/a/b"}, {"/a/c/../b", "/a/b"},
      {"/../a", "/a"},    {"a/../..", ".."},  {"./a/", "a"},
      {"a/..", "."},
  };
  for (const auto& c : cases) EXPECT_EQ(NormalizeDir(c.in), c.want) << c.in;
}

TEST(SaveDirTest, ALiveJobHoldsItsSaveDir) {
  mt::v1::Job holder;
  holder.set_id("j-3");
  holder.set_state(mt::v1::JOB_STATE_RUNNING);
  holder.mutable_spec()->mutable_checkpoint()->set_save_dir("/ckpt/run/");
  EXPECT_THAT(CheckSaveDirFree("/ckpt//run/.", holder),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("checkpoint.save_dir /ckpt/run is in use by job j-3 "
                                 "(JOB_STATE_RUNNING)")));
  EXPECT_TRUE(CheckSaveDirFree("/ckpt/run2", holder).ok());
  EXPECT_TRUE(CheckSaveDirFree("", holder).ok());  // no saves
  holder.set_state(mt::v1::JOB_STATE_PENDING);
  EXPECT_FALSE(CheckSaveDirFree("/ckpt/run", holder).ok());
  holder.set_state(mt::v1::JOB_STATE_FAILED);  // ended: its directory may be reused
  EXPECT_TRUE(CheckSaveDirFree("/ckpt/run", holder).ok());
}

}  // namespace
}  // namespace mt::coordinator
