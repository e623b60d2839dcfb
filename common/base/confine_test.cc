#include "common/base/confine.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"

namespace mt {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

// A fresh directory, resolved (the test's temporary directory may itself sit behind a link).
std::string TempDir() {
  std::string tmpl = ::testing::TempDir() + "mt_confine_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  char real[PATH_MAX];
  EXPECT_NE(::realpath(tmpl.c_str(), real), nullptr);
  return real;
}

void MakeDir(const std::string& path) { ASSERT_EQ(::mkdir(path.c_str(), 0755), 0) << path; }
void Link(const std::string& target, const std::string& at) {
  ASSERT_EQ(::symlink(target.c_str(), at.c_str()), 0) << at;
}
void Touch(const std::string& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << path;
  ::close(fd);
}

TEST(ResolvePath, NormalizesWithoutLinks) {
  EXPECT_EQ(*ResolvePath("/"), "/");
  EXPECT_EQ(*ResolvePath("//"), "/");
  EXPECT_EQ(*ResolvePath("/.."), "/");
  EXPECT_EQ(*ResolvePath("/../../x"), "/x");
  EXPECT_EQ(*ResolvePath("/nonexistent-mt/a/./b//c/"), "/nonexistent-mt/a/b/c");
  EXPECT_EQ(*ResolvePath("/nonexistent-mt/a/../b"), "/nonexistent-mt/b");
  EXPECT_EQ(*ResolvePath("/nonexistent-mt/a/../../etc"), "/etc");
}

TEST(ResolvePath, RefusesRelativeEmptyAndNul) {
  EXPECT_THAT(ResolvePath(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ResolvePath("data/x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not absolute")));
  EXPECT_THAT(ResolvePath(std::string("/a\0b", 4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NUL")));
  EXPECT_THAT(ResolvePath("/" + std::string(5000, 'a')),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ResolvePath, FollowsLinksAbsoluteRelativeChainedAndDangling) {
  const std::string d = TempDir();
  MakeDir(d + "/real");
  Link(d + "/real", d + "/abs");              // absolute target
  Link("real", d + "/rel");                   // relative target
  Link("abs", d + "/chain");                  // a link to a link
  Link("/etc/mt-dangling-xyz", d + "/dang");  // dangling, absolute
  Link("../up", d + "/real/parent");          // relative with ".."
  EXPECT_EQ(*ResolvePath(d + "/abs/f"), d + "/real/f");
  EXPECT_EQ(*ResolvePath(d + "/rel/f"), d + "/real/f");
  EXPECT_EQ(*ResolvePath(d + "/chain/f/"), d + "/real/f");
  EXPECT_EQ(*ResolvePath(d + "/dang"), "/etc/mt-dangling-xyz");
  EXPECT_EQ(*ResolvePath(d + "/dang/sub"), "/etc/mt-dangling-xyz/sub");
  EXPECT_EQ(*ResolvePath(d + "/real/parent/x"), d + "/up/x");
}

TEST(ResolvePath, DotDotAppliesAfterTheLink) {
  // /d/link -> /d/a/b; "/d/link/.." is /d/a (the kernel's answer), not /d (the lexical one).
  const std::string d = TempDir();
  MakeDir(d + "/a");
  MakeDir(d + "/a/b");
  Link(d + "/a/b", d + "/link");
  EXPECT_EQ(*ResolvePath(d + "/link/.."), d + "/a");
  EXPECT_EQ(*ResolvePath(d + "/link/../../x"), d + "/x");
  // Back into existing components after a missing one: the link there is still followed.
  EXPECT_EQ(*ResolvePath(d + "/missing/../link/f"), d + "/a/b/f");
}

TEST(ResolvePath, LinkLoopsAreAnError) {
  const std::string d = TempDir();
  Link(d + "/l2", d + "/l1");
  Link(d + "/l1", d + "/l2");
  EXPECT_THAT(ResolvePath(d + "/l1/x"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("40 symbolic links")));
}

TEST(ResolvePath, ComponentBelowAFileIsTakenAsMissing) {
  const std::string d = TempDir();
  Touch(d + "/file");
  EXPECT_EQ(*ResolvePath(d + "/file/x/.."), d + "/file");
}

TEST(PathIsWithin, PrefixTricksAndRoots) {
  EXPECT_TRUE(PathIsWithin("/data", "/data"));
  EXPECT_TRUE(PathIsWithin("/data/x", "/data"));
  EXPECT_FALSE(PathIsWithin("/data2", "/data"));
  EXPECT_FALSE(PathIsWithin("/data2/x", "/data"));
  EXPECT_FALSE(PathIsWithin("/dat", "/data"));
  EXPECT_FALSE(PathIsWithin("/", "/data"));
  EXPECT_TRUE(PathIsWithin("/anything", "/"));
  EXPECT_TRUE(PathIsWithin("/", "/"));
}

TEST(AllowedRoots, EmptyAllowsEverything) {
  AllowedRoots none;
  EXPECT_FALSE(none.enabled());
  EXPECT_THAT(none.Check("/root/x", "checkpoint.save_dir"), IsOk());
}

TEST(AllowedRoots, RootsMustBeExistingDirectories) {
  const std::string d = TempDir();
  Touch(d + "/file");
  EXPECT_THAT(AllowedRoots::Create({d + "/missing"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--allowed-root '" + d + "/missing' is not an existing")));
  EXPECT_THAT(AllowedRoots::Create({d + "/file"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(AllowedRoots::Create({"relative"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not absolute")));
}

// A peer's roots (the coordinator's, on a worker) need not exist here, but still confine, and
// are resolved here: a link inside one leads where it leads on this host.
TEST(AllowedRoots, PeerRootsNeedNotExistButStillConfine) {
  const std::string d = TempDir();
  MakeDir(d + "/data");
  MakeDir(d + "/out");
  Link(d + "/out", d + "/data/escape");
  MT_ASSERT_OK_AND_ASSIGN(
      AllowedRoots roots,
      AllowedRoots::FromPeer({d + "/missing", d + "/data"}, "the coordinator's --allowed-root"));
  EXPECT_TRUE(roots.enabled());
  EXPECT_THAT(roots.Check(d + "/missing/ck/iter_1", "checkpoint.save_dir"), IsOk());
  EXPECT_THAT(roots.Check(d + "/data/corpus", "data.data_path"), IsOk());
  EXPECT_THAT(roots.Check(d + "/data/escape/ck", "checkpoint.save_dir"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("checkpoint.save_dir")));
  EXPECT_THAT(roots.Check(d + "/missing2", "logging.tensorboard_dir"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(AllowedRoots::FromPeer({"relative"}, "the coordinator's --allowed-root"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the coordinator's --allowed-root 'relative'")));
}

TEST(AllowedRoots, ChecksResolvedPaths) {
  const std::string d = TempDir();
  MakeDir(d + "/data");
  MakeDir(d + "/data2");
  MakeDir(d + "/out");
  Link(d + "/out", d + "/data/escape");        // points out of the root
  Link(d + "/out/new", d + "/data/dangling");  // dangling, out of the root
  Link(d + "/data/sub", d + "/out/in");        // from outside into the root
  Link(d + "/data", d + "/data-link");         // the root by another name
  MT_ASSERT_OK_AND_ASSIGN(AllowedRoots roots, AllowedRoots::Create({d + "/data-link/"}));
  ASSERT_EQ(roots.roots().size(), 1u);
  EXPECT_EQ(roots.roots()[0], d + "/data");  // kept resolved, trailing slash gone
  EXPECT_THAT(roots.Check(d + "/data", "f"), IsOk());
  EXPECT_THAT(roots.Check(d + "/data/", "f"), IsOk());
  EXPECT_THAT(roots.Check(d + "/data/new/deeper/file", "f"), IsOk());
  EXPECT_THAT(roots.Check(d + "/out/in/x", "f"), IsOk());
  EXPECT_THAT(roots.Check(d + "/data-link/x", "f"), IsOk());
  EXPECT_THAT(roots.Check(d + "/data/a/../b", "f"), IsOk());

  EXPECT_THAT(roots.Check(d + "/data2/x", "checkpoint.save_dir"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("checkpoint.save_dir: '" + d + "/data2/x' is outside")));
  EXPECT_THAT(
      roots.Check(d + "/data/escape/x", "f"),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("resolves to '" + d + "/out/x'")));
  EXPECT_THAT(roots.Check(d + "/data/dangling", "f"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(roots.Check(d + "/data/../out", "f"), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(roots.Check(d + "/data/x/../../../../root", "f"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(roots.Check("/root/.ssh", "f"), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(roots.Check("/var/tmp/tb", "logging.tensorboard_dir"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("--allowed-root")));
  EXPECT_THAT(roots.Check("relative/x", "f"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("f: ")));
}

TEST(AllowedRoots, SeveralRoots) {
  const std::string d = TempDir();
  MakeDir(d + "/a");
  MakeDir(d + "/b");
  MT_ASSERT_OK_AND_ASSIGN(AllowedRoots roots, AllowedRoots::Create({d + "/a", d + "/b"}));
  EXPECT_THAT(roots.Check(d + "/a/x", "f"), IsOk());
  EXPECT_THAT(roots.Check(d + "/b/x", "f"), IsOk());
  EXPECT_THAT(roots.Check(d + "/c/x", "f"), Not(IsOk()));
}

TEST(CheckStaysInside, RefusesLinksLeavingTheDirectory) {
  const std::string d = TempDir();
  MakeDir(d + "/import");
  Touch(d + "/import/config.json");
  Touch(d + "/secret");
  Link("/etc/shadow", d + "/import/model.safetensors");
  Link("config.json", d + "/import/alias.json");
  Link(d + "/secret", d + "/import/other");
  EXPECT_THAT(CheckStaysInside(d + "/import", "config.json", "config"), IsOk());
  EXPECT_THAT(CheckStaysInside(d + "/import", "alias.json", "config"), IsOk());
  EXPECT_THAT(CheckStaysInside(d + "/import", "model.safetensors", "weights"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("leads outside")));
  EXPECT_THAT(CheckStaysInside(d + "/import", "other", "weights"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(CheckStaysInside(d + "/import", "../secret", "weights"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace mt
