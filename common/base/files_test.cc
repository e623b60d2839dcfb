#include "common/base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

TEST(Files, AtomicWriteReplacesAndLeavesNoTemporary) {
  const std::string dir = testutil::MakeTempDir("files");
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/f.txt";
  MT_ASSERT_OK(WriteFileAtomically(path, "one"));
  MT_ASSERT_OK(WriteFileAtomically(path, "two two"));
  MT_ASSERT_OK_AND_ASSIGN(std::string got, ReadFile(path));
  EXPECT_EQ(got, "two two");
  EXPECT_NE(::access((path + ".tmp." + std::to_string(::getpid())).c_str(), F_OK), 0);
}

TEST(Files, ReadFileEnforcesItsLimit) {
  const std::string dir = testutil::MakeTempDir("files");
  ASSERT_FALSE(dir.empty());
  MT_ASSERT_OK(WriteFileAtomically(dir + "/big", std::string(100, 'x')));
  EXPECT_THAT(ReadFile(dir + "/big", 99),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("limit of 99")));
  EXPECT_THAT(ReadFile(dir + "/missing"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
}

// /proc files report a size of 0; they are read to their end, within the limit.
TEST(Files, ReadFileReadsProcFilesToTheirEnd) {
  MT_ASSERT_OK_AND_ASSIGN(std::string stat, ReadFile("/proc/self/stat"));
  EXPECT_EQ(stat.substr(0, stat.find(' ')), std::to_string(::getpid()));
  MT_ASSERT_OK_AND_ASSIGN(std::string status, ReadFile("/proc/self/status"));
  EXPECT_NE(status.find("\nVmRSS:"), std::string::npos);
  MT_ASSERT_OK_AND_ASSIGN(std::string smaps, ReadFile("/proc/self/smaps"));
  EXPECT_GT(smaps.size(), 4096u);                         // more than one read
  EXPECT_NE(smaps.rfind("VmFlags:"), std::string::npos);  // to the last mapping
  EXPECT_THAT(ReadFile("/proc/self/status", 100),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("limit of 100")));
}

TEST(Files, WriteIntoMissingDirectoryFailsCleanly) {
  EXPECT_THAT(WriteFileAtomically("/nonexistent-dir-mt/x", "a"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent-dir-mt/x")));
}

TEST(Files, WriteAllWritesEveryByteAndNamesThePathOnError) {
  const std::string dir = testutil::MakeTempDir("files");
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/big.bin";
  std::string data(3 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  // A pipe takes at most its buffer per write: the short writes must be continued.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::string got;
  std::thread reader([&] {
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(n));
  });
  EXPECT_THAT(WriteAll(fds[1], data, "the pipe"), IsOk());
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  EXPECT_EQ(got, data);

  const int ro = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(ro, 0);
  EXPECT_THAT(WriteAll(ro, "x", path), StatusIs(absl::StatusCode::kInternal, HasSubstr(path)));
  ::close(ro);
  EXPECT_THAT(WriteAll(-1, "", path), IsOk());  // nothing to write touches nothing
}

TEST(Files, MakeDirectoriesCreatesParentsAndRefusesFiles) {
  const std::string dir = testutil::MakeTempDir("files");
  ASSERT_FALSE(dir.empty());
  MT_ASSERT_OK(MakeDirectories(dir + "/a/b//c/"));
  struct stat st;
  ASSERT_EQ(::stat((dir + "/a/b/c").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  MT_ASSERT_OK(MakeDirectories(dir + "/a/b/c"));  // existing: kept
  MT_ASSERT_OK(WriteFileAtomically(dir + "/a/f", "x"));
  EXPECT_THAT(MakeDirectories(dir + "/a/f/g"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr(dir + "/a/f: Not a directory")));
  EXPECT_THAT(MakeDirectories(dir + "/a/f"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("Not a directory")));
  EXPECT_THAT(MakeDirectories(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(Files, RelativePathChecks) {
  EXPECT_THAT(ValidateRelativePath("a/b/c.bin", "name"), IsOk());
  EXPECT_THAT(ValidateRelativePath("", "name"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name: path is empty")));
  EXPECT_THAT(ValidateRelativePath("/etc/passwd", "name"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("absolute")));
  EXPECT_THAT(ValidateRelativePath("a/../../b", "name"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'..'")));
  EXPECT_THAT(ValidateRelativePath(std::string("a\0b", 3), "name"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NUL")));
  EXPECT_THAT(ValidatePath(std::string(5000, 'a'), "save"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("limit of 4096")));
  EXPECT_THAT(ValidateRelativePath("a..b/c", "name"), IsOk());
}

}  // namespace
}  // namespace mt
