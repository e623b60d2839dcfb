#include "common/checkpoint/safetensors.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::checkpoint {
namespace {

using ::mt::testing::StatusIs;

using ::testing::HasSubstr;

int CountFiles(const std::string& dir) {
  int n = 0;
  DIR* d = ::opendir(dir.c_str());
  while (struct dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

std::string WithLength(const std::string& header) {
  std::string out;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  return out + header;
}

TEST(SafetensorsTest, RoundTripWithMetadata) {
  const std::string dir = testutil::MakeTempDir("st");
  HostTensor a = ZerosTensor(DType::kF32, {2, 3});
  for (int i = 0; i < 6; ++i) {
    float f = 0.5f * i;
    std::memcpy(a.data.data() + 4 * i, &f, 4);
  }
  HostTensor b = ZerosTensor(DType::kBF16, {5});
  b.data[3] = 0x3F;
  HostTensor c = ZerosTensor(DType::kU8, {0});
  const std::string path = dir + "/x.safetensors";
  MT_ASSERT_OK_AND_ASSIGN(
      FileDigest d,
      WriteSafetensors(path, {ViewOf("a", a), ViewOf("b \"quoted\"", b), ViewOf("empty", c)},
                       {{"format", "mt-shard"}, {"split.a", "1"}}));
  MT_ASSERT_OK_AND_ASSIGN(FileDigest again, DigestFile(path));
  EXPECT_EQ(d.sha256, again.sha256);
  EXPECT_EQ(d.size, again.size);
  MT_ASSERT_OK_AND_ASSIGN(SafetensorsIndex index, ReadSafetensorsIndex(path));
  EXPECT_EQ(index.data_start % 64, 0u);
  EXPECT_EQ(index.metadata.at("split.a"), "1");
  ASSERT_EQ(index.tensors.size(), 3u);
  const SafetensorsEntry* ea = index.Find("a");
  ASSERT_NE(ea, nullptr);
  MT_ASSERT_OK_AND_ASSIGN(HostTensor ra, ReadSafetensorsTensor(path, index, *ea));
  EXPECT_EQ(ra.shape, a.shape);
  EXPECT_EQ(ra.data, a.data);
  MT_ASSERT_OK_AND_ASSIGN(HostTensor rb,
                          ReadSafetensorsTensor(path, index, *index.Find("b \"quoted\"")));
  EXPECT_EQ(rb.dtype, DType::kBF16);
  EXPECT_EQ(rb.data, b.data);
  EXPECT_EQ(CountFiles(dir), 1);  // no temporary left behind
}

// A file as Python's safetensors writes it (8-byte padding, keys in any order).
TEST(SafetensorsTest, ParsesForeignHeaders) {
  const std::string header = R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},)"
                             R"("v":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}   )";
  MT_ASSERT_OK_AND_ASSIGN(SafetensorsIndex index,
                          ParseSafetensorsHeader(header, 8 + header.size() + 12));
  ASSERT_EQ(index.tensors.size(), 2u);
  EXPECT_EQ(index.tensors[0].name, "v");  // in data order
  EXPECT_EQ(index.tensors[1].dtype, DType::kF16);
}

TEST(SafetensorsTest, RejectsMalformedFiles) {
  const uint64_t size = 8 + 200;
  auto parse = [&](const std::string& h, uint64_t data) {
    return ParseSafetensorsHeader(h, 8 + h.size() + data);
  };
  EXPECT_THAT(parse("not json", 0), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("do not fit")));
  EXPECT_THAT(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("holes")));
  EXPECT_THAT(parse(R"({"a":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}})", 1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("dtype")));
  EXPECT_THAT(parse(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(parse(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cover")));
  (void)size;

  const std::string dir = testutil::MakeTempDir("st");
  const std::string path = dir + "/bad.safetensors";
  MT_ASSERT_OK(WriteFileAtomically(path, WithLength("{}").substr(0, 5)));
  EXPECT_THAT(ReadSafetensorsIndex(path), StatusIs(absl::StatusCode::kDataLoss));
  std::string huge = WithLength("{}");
  huge[6] = 1;  // a header length far beyond the file
  MT_ASSERT_OK(WriteFileAtomically(path, huge));
  EXPECT_THAT(ReadSafetensorsIndex(path),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("header length")));
}

TEST(SafetensorsTest, WriterRejectsBadInputAndLeavesNothing) {
  const std::string dir = testutil::MakeTempDir("st");
  HostTensor a = ZerosTensor(DType::kF32, {2});
  TensorView v = ViewOf("a", a);
  v.nbytes = 4;
  EXPECT_THAT(WriteSafetensors(dir + "/x.safetensors", {v}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(WriteSafetensors(dir + "/x.safetensors", {ViewOf("a", a), ViewOf("a", a)}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(WriteSafetensors(dir + "/no/such/x.safetensors", {ViewOf("a", a)}, {}),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(CountFiles(dir), 0);
}

// The index and tensors of a whole file in memory are the file's.
TEST(SafetensorsTest, ParsesAFileHeldInMemory) {
  const std::string dir = testutil::MakeTempDir("st");
  HostTensor a = ZerosTensor(DType::kF32, {3});
  a.data[5] = 7;
  HostTensor b = ZerosTensor(DType::kI64, {2});
  b.data[9] = 1;
  const std::string path = dir + "/m.safetensors";
  MT_ASSERT_OK(WriteSafetensors(path, {ViewOf("a", a), ViewOf("b", b)}, {{"k", "v"}}).status());
  MT_ASSERT_OK_AND_ASSIGN(std::string file, ReadFile(path));
  MT_ASSERT_OK_AND_ASSIGN(SafetensorsIndex index, ParseSafetensorsFile(file));
  MT_ASSERT_OK_AND_ASSIGN(SafetensorsIndex on_disk, ReadSafetensorsIndex(path));
  EXPECT_EQ(index.data_start, on_disk.data_start);
  EXPECT_EQ(index.file_size, file.size());
  EXPECT_EQ(index.metadata.at("k"), "v");
  ASSERT_NE(index.Find("b"), nullptr);
  HostTensor back = SafetensorsTensorFromMemory(file, index, *index.Find("b"));
  EXPECT_EQ(back.dtype, DType::kI64);
  EXPECT_EQ(back.shape, (std::vector<int64_t>{2}));
  EXPECT_TRUE(back.data == b.data);
  // Truncated: the header no longer fits, or the data does not.
  EXPECT_THAT(ParseSafetensorsFile(absl::string_view(file).substr(0, 5)),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(ParseSafetensorsFile(absl::string_view(file).substr(0, file.size() - 1)),
              StatusIs(absl::StatusCode::kDataLoss));
}

}  // namespace
}  // namespace mt::checkpoint
