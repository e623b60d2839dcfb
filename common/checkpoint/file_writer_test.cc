#include "common/checkpoint/file_writer.h"

#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::checkpoint {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

std::string TempDir() {
  std::string tmpl = std::string(::testing::TempDir()) + "/fw_XXXXXX";
  return ::mkdtemp(tmpl.data());
}

// Bytes that differ everywhere (a hash of a wrong slice would not match).
std::string Pattern(size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

// SHA-256 of "abc" (FIPS 180-2, appendix B.1).
TEST(FileWriterTest, Sha256KnownAnswer) {
  Sha256 sha;
  sha.Update("abc", 3);
  EXPECT_EQ(sha.HexDigest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

// Appends larger than the writer's 4 MiB hash-then-write slices and unaligned pieces: the
// digest Commit returns is the file's, and the file holds exactly what was appended.
TEST(FileWriterTest, CommitDigestIsTheFilesAcrossSlices) {
  const std::string dir = TempDir();
  const std::string data = Pattern((9 << 20) + 123);
  MT_ASSERT_OK_AND_ASSIGN(auto w, AtomicFileWriter::Create(dir + "/f.bin"));
  MT_ASSERT_OK(w->Append(data.data(), 7));
  MT_ASSERT_OK(w->Append(data.data() + 7, data.size() - 7));
  MT_ASSERT_OK_AND_ASSIGN(FileDigest written, w->Commit());
  EXPECT_EQ(written.size, static_cast<int64_t>(data.size()));
  MT_ASSERT_OK_AND_ASSIGN(FileDigest reread, DigestFile(dir + "/f.bin"));
  EXPECT_EQ(reread.sha256, written.sha256);
  Sha256 sha;
  sha.Update(data.data(), data.size());
  EXPECT_EQ(written.sha256, sha.HexDigest());
  MT_ASSERT_OK_AND_ASSIGN(std::string back, ReadFile(dir + "/f.bin", 64 << 20));
  EXPECT_TRUE(back == data);
}

// DigestFile with `keep`: the same digest, and the bytes read are the file's.
TEST(FileWriterTest, DigestFileKeepsWhatItHashed) {
  const std::string dir = TempDir();
  const std::string data = Pattern((8 << 20) + 5);  // more than one 8 MiB read
  MT_ASSERT_OK(WriteFileAtomically(dir + "/f.bin", data));
  FileBytes kept;
  MT_ASSERT_OK_AND_ASSIGN(FileDigest with, DigestFile(dir + "/f.bin", &kept));
  MT_ASSERT_OK_AND_ASSIGN(FileDigest without, DigestFile(dir + "/f.bin"));
  EXPECT_EQ(with.sha256, without.sha256);
  EXPECT_EQ(with.size, static_cast<int64_t>(data.size()));
  ASSERT_EQ(kept.size, data.size());
  EXPECT_TRUE(kept.view() == data);
  EXPECT_THAT(DigestFile(dir + "/missing", &kept), StatusIs(absl::StatusCode::kNotFound));

  InMemoryFiles files;
  files.Add("a", std::move(kept));
  EXPECT_EQ(files.bytes(), static_cast<int64_t>(data.size()));
  ASSERT_NE(files.Find("a"), nullptr);
  EXPECT_EQ(files.Find("b"), nullptr);
}

// Every index runs once whatever the thread count; the lowest failing index's error wins.
TEST(FileWriterTest, RunParallelRunsEveryIndexAndReportsTheFirstError) {
  for (int threads : {1, 3, 16}) {
    std::vector<std::atomic<int>> runs(10);
    absl::Status s = RunParallel(runs.size(), threads, [&](size_t i) -> absl::Status {
      runs[i].fetch_add(1);
      if (i == 7) return absl::InternalError("seven");
      if (i == 4) return absl::ResourceExhaustedError("four");
      return absl::OkStatus();
    });
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("four")))
        << threads << " threads";
    for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << i;
  }
  MT_EXPECT_OK(RunParallel(0, 4, [](size_t) { return absl::InternalError("never"); }));
  EXPECT_GE(DefaultIoThreads(), 1);
  EXPECT_LE(DefaultIoThreads(), 8);
}

}  // namespace
}  // namespace mt::checkpoint
