#include "common/base/paths.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

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
  std::string tmpl = ::testing::TempDir() + "mt_paths_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string file = JoinPath(tmpl, "f");
  EXPECT_TRUE(PathExists(tmpl));
  EXPECT_TRUE(IsDirectory(tmpl));
  EXPECT_FALSE(PathExists(file));
  EXPECT_FALSE(IsDirectory(file));
  const int fd = ::open(file.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_TRUE(PathExists(file));
  EXPECT_FALSE(IsDirectory(file));
  ::unlink(file.c_str());
  ::rmdir(tmpl.c_str());
  EXPECT_FALSE(PathExists(tmpl));
}

}  // namespace
}  // namespace mt
