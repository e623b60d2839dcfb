#include "common/base/paths.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt {
namespace {

TEST(Paths, JoinPathPutsExactlyOneSlashBetween) {
  struct Case {
    const char* dir;
    const char* name;
    const char* want;
  };
  const Case cases[] = {
      {"a", "b", "a/b"}, {"a/", "b", "a/b"}, {"a//", "b", "a/b"}, {"a", "/b", "a/b"},
      {"", "b", "b"},    {"a", "", "a"},     {"/", "b", "/b"},    {"/x/y", "z/w", "/x/y/z/w"},
      {"", "", ""},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(JoinPath(c.dir, c.name), c.want) << "dir='" << c.dir << "' name='" << c.name << "'";
  }
}

TEST(Paths, ExistsAndIsDirectoryFollowTheFileSystem) {
  const std::string dir = testutil::MakeTempDir("paths");
  ASSERT_FALSE(dir.empty());
  const std::string file = JoinPath(dir, "f");
  EXPECT_TRUE(PathExists(dir));
  EXPECT_TRUE(IsDirectory(dir));
  EXPECT_FALSE(PathExists(file));
  EXPECT_FALSE(IsDirectory(file));
  const int fd = ::open(file.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_TRUE(PathExists(file));
  EXPECT_FALSE(IsDirectory(file));
  ::unlink(file.c_str());
  ::rmdir(dir.c_str());
  EXPECT_FALSE(PathExists(dir));
}

}  // namespace
}  // namespace mt
