#include "common/checkpoint/file_writer.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::checkpoint {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

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

// Bytes of `path` in the page cache (mincore over a read-only mapping, which faults nothing in).
int64_t ResidentBytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  int64_t resident = 0;
  if (size > 0) {
    void* map = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      const long page = ::sysconf(_SC_PAGESIZE);
      std::vector<unsigned char> in((static_cast<size_t>(size) + page - 1) / page);
      if (::mincore(map, static_cast<size_t>(size), in.data()) == 0) {
        for (unsigned char c : in) resident += (c & 1) ? page : 0;
      } else {
        resident = -1;
      }
      ::munmap(map, static_cast<size_t>(size));
    } else {
      resident = -1;
    }
  }
  ::close(fd);
  return resident;
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
  const std::string dir = testutil::MakeTempDir("fw");
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

// A writer hands its data to the disk chunk by chunk and drops each chunk from the page cache
// one chunk later: while it writes, at most two chunks (and the append in progress) are cached;
// after Commit nothing is. Without drop_written_pages the whole file stays cached (which shows
// that the measure sees cached pages at all).
TEST(FileWriterTest, WrittenPagesLeaveThePageCache) {
  const std::string dir = testutil::MakeTempDir("fw");
  struct statfs fs;
  ASSERT_EQ(::statfs(dir.c_str(), &fs), 0);
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
    GTEST_SKIP() << dir << " is in memory (tmpfs): its pages cannot leave the cache";
  }
  constexpr int64_t kChunk = 1 << 20;
  constexpr size_t kAppend = 256 << 10;
  const std::string data = Pattern(12 << 20);
  {
    // What the kernel and this file system do, with plain system calls: written pages are
    // cached and seen by mincore, POSIX_FADV_DONTNEED drops them once clean, sync_file_range
    // works. Where one of these does not hold, the writer cannot do better than its fsync.
    const std::string probe = dir + "/probe.bin";
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, data.data(), kChunk), kChunk);
    const bool ranges = ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) == 0;
    ASSERT_EQ(::fsync(fd), 0);
    const int64_t cached = ResidentBytes(probe);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    const int64_t dropped = ResidentBytes(probe);
    ::close(fd);
    if (!ranges || cached != kChunk || dropped != 0) {
      GTEST_SKIP() << dir << ": sync_file_range " << (ranges ? "works" : "fails") << ", " << cached
                   << " of " << kChunk << " written bytes seen cached, " << dropped
                   << " left after POSIX_FADV_DONTNEED: this file system does not let a writer "
                      "drop its pages";
    }
  }
  AtomicFileWriter::Options options;
  options.writeback_chunk_bytes = kChunk;
  MT_ASSERT_OK_AND_ASSIGN(auto w, AtomicFileWriter::Create(dir + "/dropped.bin", options));
  int64_t most = 0;
  for (size_t off = 0; off < data.size(); off += kAppend) {
    MT_ASSERT_OK(w->Append(data.data() + off, kAppend));
    const int64_t resident = ResidentBytes(w->temp_path());
    ASSERT_GE(resident, 0) << w->temp_path();
    most = std::max(most, resident);
  }
  EXPECT_LE(most, 2 * kChunk + static_cast<int64_t>(kAppend));
  MT_ASSERT_OK_AND_ASSIGN(FileDigest digest, w->Commit());
  EXPECT_EQ(ResidentBytes(dir + "/dropped.bin"), 0);
  // Dropping changed nothing of what was written.
  Sha256 sha;
  sha.Update(data.data(), data.size());
  EXPECT_EQ(digest.sha256, sha.HexDigest());
  MT_ASSERT_OK_AND_ASSIGN(FileDigest reread, DigestFile(dir + "/dropped.bin"));
  EXPECT_EQ(reread.sha256, digest.sha256);

  options.drop_written_pages = false;
  MT_ASSERT_OK_AND_ASSIGN(auto kept, AtomicFileWriter::Create(dir + "/kept.bin", options));
  MT_ASSERT_OK(kept->Append(data));
  MT_ASSERT_OK(kept->Commit().status());
  EXPECT_EQ(ResidentBytes(dir + "/kept.bin"), static_cast<int64_t>(data.size()));

  options.writeback_chunk_bytes = -1;
  EXPECT_THAT(AtomicFileWriter::Create(dir + "/bad.bin", options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("writeback_chunk_bytes")));
}

// DigestFile with `keep`: the same digest, and the bytes read are the file's.
TEST(FileWriterTest, DigestFileKeepsWhatItHashed) {
  const std::string dir = testutil::MakeTempDir("fw");
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

// A kept file of several read blocks is read ahead by a thread of its own while the caller
// hashes: the digest is the file's, the kept bytes are the file's, and the observer sees every
// block once, in order, with the file's bytes at its offset.
TEST(FileWriterTest, DigestFileReadAheadKeepsOrderAndBytes) {
  const std::string dir = testutil::MakeTempDir("fw");
  const std::string data = Pattern((40 << 20) + 7);  // five 8 MiB blocks and a tail
  MT_ASSERT_OK(WriteFileAtomically(dir + "/big.bin", data));
  uint64_t next = 0;
  bool in_order = true, bytes_match = true;
  int blocks = 0;
  FileBytes kept;
  MT_ASSERT_OK_AND_ASSIGN(
      FileDigest with,
      DigestFile(dir + "/big.bin", &kept, [&](uint64_t offset, absl::string_view bytes) {
        in_order = in_order && offset == next;
        bytes_match =
            bytes_match && data.compare(offset, bytes.size(), bytes.data(), bytes.size()) == 0;
        next = offset + bytes.size();
        ++blocks;
      }));
  EXPECT_TRUE(in_order);
  EXPECT_TRUE(bytes_match);
  EXPECT_EQ(next, data.size());
  EXPECT_GE(blocks, 6);
  Sha256 sha;
  sha.Update(data.data(), data.size());
  EXPECT_EQ(with.sha256, sha.HexDigest());
  EXPECT_EQ(with.size, static_cast<int64_t>(data.size()));
  ASSERT_EQ(kept.size, data.size());
  EXPECT_TRUE(kept.view() == data);
  // A damaged byte deep in the file changes the digest (the read-ahead hashes what it read).
  {
    FILE* f = std::fopen((dir + "/big.bin").c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, (33 << 20) + 3, SEEK_SET);
    std::fputc(data[(33 << 20) + 3] ^ 0x10, f);
    std::fclose(f);
  }
  FileBytes again;
  MT_ASSERT_OK_AND_ASSIGN(FileDigest damaged, DigestFile(dir + "/big.bin", &again));
  EXPECT_NE(damaged.sha256, with.sha256);
  EXPECT_EQ(damaged.size, with.size);
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
