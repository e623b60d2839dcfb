// The built mt-worker binary: it answers --help and --version, and it does not link LibTorch
// (a trainer crash must never take the daemon down; DESIGN.md §3). The configure step also
// rejects LibTorch includes under worker/daemon (CMakeLists.txt); this checks what the
// linker made of the dependencies.
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::worker {
namespace {

using ::testing::HasSubstr;

constexpr char kBinary[] = MT_WORKER_BINARY;

TEST(DaemonBinaryTest, AnswersVersion) {
  auto r = testutil::RunCommand({kBinary, "--version"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_THAT(r->out, HasSubstr(kVersion));
}

TEST(DaemonBinaryTest, AnswersHelp) {
  auto r = testutil::RunCommand({kBinary, "--help"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_THAT(r->out, HasSubstr("--coordinator"));
  EXPECT_THAT(r->out, HasSubstr("mt-worker train"));
  EXPECT_THAT(r->out, HasSubstr("mt-worker generate"));
  EXPECT_THAT(r->out, HasSubstr("mt-worker eval"));
}

TEST(DaemonBinaryTest, ABadFlagIsNamedBeforeAnythingStarts) {
  auto r = testutil::RunCommand({kBinary, "--cpu_cores=-1", "--metrics_port=0"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2) << r->err;
  EXPECT_THAT(r->err, HasSubstr("--cpu-cores must be 0..4096"));
  EXPECT_THAT(r->err, ::testing::Not(HasSubstr("metrics on")));  // no endpoint was started
}

// `mt-worker generate|eval ARGS` run `mt-train generate|eval ARGS` in its place (where this
// build has the trainer beside the daemon).
TEST(DaemonBinaryTest, GenerateAndEvalRunTheTrainerBinary) {
  const std::string daemon = kBinary;
  const std::string trainer = daemon.substr(0, daemon.rfind('/')) + "/mt-train";
  if (::access(trainer.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << trainer << " in this build";
  for (const char* verb : {"generate", "eval"}) {
    auto r = testutil::RunCommand({kBinary, verb, "--help"});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->exit_code, 0) << r->err;
    EXPECT_THAT(r->out, HasSubstr(absl::StrCat("usage: mt-worker ", verb, " CHECKPOINT")));
  }
}

// Whether a loader listing names LibTorch's libraries.
bool NamesLibTorch(const std::string& listing) {
  for (const char* lib : {"libtorch", "libc10", "libcaffe2"}) {
    if (listing.find(lib) != std::string::npos) return true;
  }
  return false;
}

TEST(DaemonBinaryTest, DoesNotLinkLibTorch) {
  // The direct dependencies (readelf) and everything the loader would map (ldd).
  auto needed = testutil::RunCommand({"/bin/sh", "-c", absl::StrCat("readelf -d ", kBinary)});
  ASSERT_TRUE(needed.ok()) << needed.status();
  ASSERT_EQ(needed->exit_code, 0) << needed->err;
  ASSERT_THAT(needed->out, HasSubstr("(NEEDED)"));  // a listing to check, not an empty one
  EXPECT_FALSE(NamesLibTorch(needed->out)) << needed->out;
  auto loaded = testutil::RunCommand({"/bin/sh", "-c", absl::StrCat("ldd ", kBinary)});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->exit_code, 0) << loaded->err;
  ASSERT_THAT(loaded->out, HasSubstr("libc.so"));
  EXPECT_FALSE(NamesLibTorch(loaded->out)) << loaded->out;
}

}  // namespace
}  // namespace mt::worker
