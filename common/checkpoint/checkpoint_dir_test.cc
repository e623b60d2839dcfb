#include "common/checkpoint/checkpoint_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/reshard.h"
#include "common/checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::checkpoint {
namespace {

using ::mt::testing::StatusIs;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

std::string TempDir() {
  std::string tmpl = std::string(::testing::TempDir()) + "/ckd_XXXXXX";
  return ::mkdtemp(tmpl.data());
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) out.push_back(e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// One save exactly as the trainer's ranks make it: each TP rank writes its shard into the
// partial directory, then rank 0 commits. Tensor values depend on (step, rank, i).
absl::Status SaveSynthetic(const std::string& save_dir, int64_t step, int tp_size,
                           int64_t floats_per_rank, bool fail_rank_1 = false) {
  const std::string partial = JoinPath(save_dir, PartialDirName(step, 0));
  if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
    return IoError("mkdir", partial, errno);
  std::vector<ShardResult> results;
  for (int r = 0; r < tp_size; ++r) {
    HostTensor w = ZerosTensor(DType::kF32, {floats_per_rank / 4, 4});
    float* p = reinterpret_cast<float*>(w.data.data());
    for (int64_t i = 0; i < w.numel(); ++i) p[i] = static_cast<float>(step * 1000 + r * 100 + i);
    HostTensor ln = ZerosTensor(DType::kF32, {4});
    ShardResult res;
    res.rank = r;
    const std::string file = ShardFileName(r, 0);
    auto d =
        WriteSafetensors(JoinPath(partial, file), {ViewOf("model.w", w), ViewOf("model.ln", ln)},
                         {{"format", kShardFormatName},
                          {"tp_rank", std::to_string(r)},
                          {"tp_size", std::to_string(tp_size)},
                          {"pp_rank", "0"},
                          {"split.model.w", "0"}});
    if (fail_rank_1 && r == 1) d = absl::ResourceExhaustedError("injected: disk full");
    if (d.ok()) {
      res.ok = true;
      res.file = file;
      res.size = d->size;
      res.sha256 = d->sha256;
    } else {
      res.error = std::string(d.status().message());
    }
    // Results travel between ranks as strings.
    MT_ASSIGN_OR_RETURN(ShardResult parsed, ParseShardResult(SerializeShardResult(res)));
    results.push_back(parsed);
  }
  mt::v1::CheckpointManifest base;
  base.set_step(step);
  base.set_consumed_samples(step * 8);
  base.set_loss(1.0 / static_cast<double>(step + 1));
  base.mutable_layout()->set_tensor_model_parallel_size(tp_size);
  return CommitCheckpoint(save_dir, partial, base, results).status();
}

void FlipOneBit(const std::string& path, off_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c;
  ASSERT_EQ(::pread(fd, &c, 1, offset), 1);
  c ^= 0x10;
  ASSERT_EQ(::pwrite(fd, &c, 1, offset), 1);
  ::close(fd);
}

TEST(CheckpointDirTest, Names) {
  EXPECT_EQ(IterationDirName(10), "iter_0000010");
  EXPECT_EQ(ParseIterationDirName("iter_0000010"), 10);
  EXPECT_EQ(ParseIterationDirName("iter_12345678"), 12345678);
  EXPECT_EQ(ParseIterationDirName("iter_10"), -1);
  EXPECT_EQ(ParseIterationDirName("iter_00000x1"), -1);
  EXPECT_EQ(ShardFileName(1, 2), "mp_rank_01_002.safetensors");
  EXPECT_THAT(ParseShardResult("ok\t0\t../../etc/passwd\t1\tab"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CheckpointDirTest, CommitWritesManifestThenLatest) {
  const std::string dir = TempDir();
  MT_ASSERT_OK(SaveSynthetic(dir, 10, 2, 64));
  MT_ASSERT_OK_AND_ASSIGN(int64_t latest, ReadLatest(dir));
  EXPECT_EQ(latest, 10);
  EXPECT_THAT(Entries(dir), ElementsAre("iter_0000010", kLatestFile));
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, ReadManifest(dir + "/iter_0000010"));
  EXPECT_EQ(m.format(), "mt-checkpoint");
  EXPECT_EQ(m.format_version(), 1);
  EXPECT_EQ(m.step(), 10);
  ASSERT_EQ(m.files_size(), 2);
  EXPECT_EQ(m.files(0).sha256().size(), 64u);
  ASSERT_EQ(m.tensors_size(), 4);
  for (const auto& t : m.tensors()) {
    if (t.name() == "model.w") {
      EXPECT_EQ(t.split_dim(), 0);
      EXPECT_EQ(t.full_shape(0), 32);  // 16 rows per rank, 2 ranks
    } else {
      EXPECT_EQ(t.split_dim(), -1);
    }
  }
  EXPECT_THAT(VerifyCheckpointFiles(dir + "/iter_0000010", m), IsEmpty());
  // Both TP slices assemble into the whole tensor, rank 0's rows first.
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenCheckpointSource(dir + "/iter_0000010", m));
  MT_ASSERT_OK_AND_ASSIGN(HostTensor full, source->Full("model.w"));
  EXPECT_EQ(full.shape, (std::vector<int64_t>{32, 4}));
  float f;
  std::memcpy(&f, full.data.data() + 64 * 4, 4);
  EXPECT_EQ(f, 10 * 1000 + 100);
}

TEST(CheckpointDirTest, DamagedCheckpointsFallBackToThePreviousGoodOne) {
  const std::string dir = TempDir();
  MT_ASSERT_OK(SaveSynthetic(dir, 5, 2, 64));
  MT_ASSERT_OK(SaveSynthetic(dir, 10, 2, 64));
  MT_ASSERT_OK(SaveSynthetic(dir, 15, 2, 64));
  // A flipped bit in the newest, a missing shard in the one before.
  FlipOneBit(dir + "/iter_0000015/mp_rank_01_000.safetensors", 200);
  ASSERT_EQ(::unlink((dir + "/iter_0000010/mp_rank_00_000.safetensors").c_str()), 0);
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m15, ReadManifest(dir + "/iter_0000015"));
  EXPECT_THAT(VerifyCheckpointFiles(dir + "/iter_0000015", m15),
              ElementsAre("mp_rank_01_000.safetensors: sha256 mismatch"));
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice c, ChooseCheckpoint(dir));
  EXPECT_EQ(c.manifest.step(), 5);
  EXPECT_EQ(c.dir, dir + "/iter_0000005");
  ASSERT_EQ(c.problems.size(), 2u);
  EXPECT_THAT(c.problems[0], HasSubstr("iter_0000015: mp_rank_01_000.safetensors: sha256"));
  EXPECT_THAT(c.problems[1], HasSubstr("iter_0000010: mp_rank_00_000.safetensors: missing"));
  // An explicitly named damaged checkpoint is an error, not a silent fallback.
  EXPECT_THAT(ChooseCheckpoint(dir + "/iter_0000015"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("sha256 mismatch")));
  EXPECT_THAT(ChooseCheckpoint(TempDir()), StatusIs(absl::StatusCode::kNotFound));
}

TEST(CheckpointDirTest, AFailedRankLeavesLatestAndThePreviousCheckpoint) {
  const std::string dir = TempDir();
  MT_ASSERT_OK(SaveSynthetic(dir, 5, 2, 64));
  EXPECT_THAT(SaveSynthetic(dir, 10, 2, 64, /*fail_rank_1=*/true),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 1: injected: disk full")));
  EXPECT_THAT(Entries(dir), ElementsAre("iter_0000005", kLatestFile));
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice c, ChooseCheckpoint(dir));
  EXPECT_EQ(c.manifest.step(), 5);
  EXPECT_THAT(c.problems, IsEmpty());
}

// A real full disk: the save runs in a child whose file-size limit (RLIMIT_FSIZE) makes the
// kernel fail the shard's write with EFBIG, as ENOSPC would.
TEST(CheckpointDirTest, DiskFullDuringSaveKeepsThePreviousCheckpoint) {
  const std::string dir = TempDir();
  MT_ASSERT_OK(SaveSynthetic(dir, 5, 2, 64));
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {64 << 10, 64 << 10};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    absl::Status s = SaveSynthetic(dir, 10, 2, 1 << 16);  // 256 KiB per shard
    const bool full = absl::IsAborted(s) && absl::StrContains(s.message(), "disk full");
    ::_exit(full ? 42 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42) << "the save did not fail with a disk-full error";
  EXPECT_THAT(Entries(dir), ElementsAre("iter_0000005", kLatestFile));  // nothing left over
  MT_ASSERT_OK_AND_ASSIGN(int64_t latest, ReadLatest(dir));
  EXPECT_EQ(latest, 5);
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice c, ChooseCheckpoint(dir));
  EXPECT_EQ(c.manifest.step(), 5);
  EXPECT_THAT(c.problems, IsEmpty());
}

// SIGKILL at random moments while a process saves 50 checkpoints: whenever it dies, `latest`
// names a checkpoint that verifies.
TEST(CheckpointDirTest, KillDuringSavesNeverLeavesABadLatest) {
  const std::string dir = TempDir();
  // How long one save takes on this machine: the kills land within the next ~4 saves, so that
  // most rounds are cut short whatever the machine's speed.
  const std::string probe = TempDir();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= 3; ++step)
    ASSERT_TRUE(SaveSynthetic(probe, step, 2, 1 << 16).ok());
  const int64_t save_us = std::max<int64_t>(
      200,
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
              .count() /
          3);
  std::mt19937 rng(1234);
  int64_t latest = 0;
  int kills = 0;
  for (int round = 0; round < 400 && latest < 50; ++round) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int64_t step = latest + 1; step <= 50; ++step) {
        if (!SaveSynthetic(dir, step, 2, 1 << 16).ok()) ::_exit(1);  // 256 KiB per shard
      }
      ::_exit(0);
    }
    ::usleep(static_cast<useconds_t>(std::uniform_int_distribution<int64_t>(0, 4 * save_us)(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) ++kills;
    auto l = ReadLatest(dir);
    if (!l.ok()) {
      ASSERT_TRUE(absl::IsNotFound(l.status())) << l.status();
      continue;
    }
    ASSERT_GE(*l, latest);
    latest = *l;
    const std::string cdir = JoinPath(dir, IterationDirName(latest));
    MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, ReadManifest(cdir));
    ASSERT_THAT(VerifyCheckpointFiles(cdir, m), IsEmpty()) << "after kill " << kills;
    MT_ASSERT_OK_AND_ASSIGN(LoadChoice c, ChooseCheckpoint(dir));
    ASSERT_EQ(c.manifest.step(), latest);
  }
  EXPECT_EQ(latest, 50);
  EXPECT_GE(kills, 10);
}

}  // namespace
}  // namespace mt::checkpoint
