#include "tests/testutil/subprocess.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace mt::testutil {
namespace {

// Runs `body` in a forked child that then exits normally (its static objects destroyed), and
// returns the folder the child made, read back through a pipe.
template <typename Body>
std::string FolderMadeByAChild(Body body) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const std::string dir = body();
    const ssize_t n = ::write(fds[1], dir.data(), dir.size());
    ::close(fds[1]);
    std::exit(n == static_cast<ssize_t>(dir.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string dir;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) dir.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return dir;
}

TEST(MakeTempDirTest, ItsFoldersAreRemovedWhenTheProcessExits) {
  const std::string dir = FolderMadeByAChild([] {
    ::unsetenv("MT_KEEP_TEST_DIRS");
    const std::string d = MakeTempDir("removed");
    std::filesystem::create_directories(d + "/a/b");
    std::filesystem::create_symlink("/etc", d + "/a/link");  // removed, not followed
    return d;
  });
  ASSERT_FALSE(dir.empty());
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  EXPECT_TRUE(std::filesystem::exists("/etc/passwd"));
}

TEST(MakeTempDirTest, MtKeepTestDirsKeepsThem) {
  const std::string dir = FolderMadeByAChild([] {
    ::setenv("MT_KEEP_TEST_DIRS", "1", 1);
    return MakeTempDir("kept");
  });
  ASSERT_FALSE(dir.empty());
  EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir;
  std::filesystem::remove_all(dir);
}

TEST(MakeTempDirTest, AForkedChildLeavesItsParentsFolders) {
  const std::string mine = MakeTempDir("parent");
  ASSERT_FALSE(mine.empty());
  FolderMadeByAChild([] { return std::string("-"); });
  EXPECT_TRUE(std::filesystem::is_directory(mine)) << mine;
}

}  // namespace
}  // namespace mt::testutil
