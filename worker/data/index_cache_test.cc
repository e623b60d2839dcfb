#include "worker/data/index_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"
#include "worker/data/data_test_util.h"

namespace mt::data {
namespace {

using ::mt::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class IndexCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::MakeTempDir("worker_data");
    ASSERT_FALSE(dir_.empty());
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  void WriteSample(const std::string& path) {
    MT_ASSERT_OK(WriteIndexCache(
        path, "desc", {CacheArray::Of(a16_), CacheArray::Of(a32_), CacheArray::Of(a64_)}));
  }

  std::string dir_;
  std::vector<int16_t> a16_ = {1, -2, 3};
  std::vector<int32_t> a32_ = {};
  std::vector<int64_t> a64_ = {int64_t{1} << 40, -7};
};

TEST_F(IndexCacheTest, RoundTrips) {
  const std::string path = Path("x.mtidx");
  WriteSample(path);
  MT_ASSERT_OK_AND_ASSIGN(IndexCacheFile f, IndexCacheFile::Read(path, "desc"));
  ASSERT_EQ(f.num_arrays(), 3u);
  MT_ASSERT_OK_AND_ASSIGN(auto a, f.Array<int16_t>(0));
  EXPECT_THAT(a, ElementsAre(1, -2, 3));
  MT_ASSERT_OK_AND_ASSIGN(auto b, f.Array<int32_t>(1));
  EXPECT_TRUE(b.empty());
  MT_ASSERT_OK_AND_ASSIGN(auto c, f.Array<int64_t>(2));
  EXPECT_THAT(c, ElementsAre(int64_t{1} << 40, -7));
  EXPECT_THAT(f.Array<int32_t>(0), StatusIs(absl::StatusCode::kDataLoss));  // wrong type
  EXPECT_THAT(f.Array<int32_t>(3), StatusIs(absl::StatusCode::kDataLoss));  // no such array
  // No temporary file is left behind.
  EXPECT_EQ(::access((path + ".tmp").c_str(), F_OK), -1);
}

TEST_F(IndexCacheTest, RejectsMissingDamagedAndForeignFiles) {
  EXPECT_THAT(IndexCacheFile::Read(Path("none"), "desc"), StatusIs(absl::StatusCode::kNotFound));

  const std::string path = Path("x.mtidx");
  WriteSample(path);
  EXPECT_THAT(IndexCacheFile::Read(path, "other"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("other indices")));

  MT_ASSERT_OK_AND_ASSIGN(std::string good, ReadFile(path));
  for (size_t at : {size_t{0}, size_t{9}, size_t{30}, good.size() / 2, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x40;
    MT_ASSERT_OK(WriteFileAtomically(path, bad));
    EXPECT_THAT(IndexCacheFile::Read(path, "desc"), StatusIs(absl::StatusCode::kDataLoss))
        << "byte " << at;
  }
  MT_ASSERT_OK(WriteFileAtomically(path, good.substr(0, good.size() - 5)));
  EXPECT_THAT(IndexCacheFile::Read(path, "desc"), StatusIs(absl::StatusCode::kDataLoss));
  MT_ASSERT_OK(WriteFileAtomically(path, ""));
  EXPECT_THAT(IndexCacheFile::Read(path, "desc"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
}

TEST_F(IndexCacheTest, Sha256HexOfKnownInput) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(IndexCacheTest, LocksAndDirectories) {
  const std::string nested = Path("a/b/c");
  MT_ASSERT_OK(MakeDirectories(nested));
  MT_ASSERT_OK(MakeDirectories(nested));  // already there
  struct stat st;
  ASSERT_EQ(::stat(nested.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  MT_ASSERT_OK(WriteFileAtomically(Path("file"), "x"));
  EXPECT_FALSE(MakeDirectories(Path("file/sub")).ok());

  {
    MT_ASSERT_OK_AND_ASSIGN(CacheLock lock, CacheLock::Acquire(nested + "/idx"));
    CacheLock moved = std::move(lock);
  }
  // Released: it can be taken again.
  MT_ASSERT_OK_AND_ASSIGN(CacheLock again, CacheLock::Acquire(nested + "/idx"));
  EXPECT_FALSE(CacheLock::Acquire(Path("file/sub/idx")).ok());
}

}  // namespace
}  // namespace mt::data
