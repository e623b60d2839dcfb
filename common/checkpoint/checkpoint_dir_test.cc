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
#include "common/base/errors.h"
#include "common/base/files.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "common/checkpoint/file_writer.h"
#include "common/checkpoint/reshard.h"
#include "common/checkpoint/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::checkpoint {
namespace {

using ::mt::testing::StatusIs;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

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
    return ErrnoStatus("mkdir", partial, errno);
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

// A save in which each of `tp_size` ranks splits its shard over `files_per_rank` files (format
// version 2), one tensor "model.w<i>" of 16 floats per file: value step * 1000 + rank * 100 + i.
absl::Status SaveSplit(const std::string& save_dir, int64_t step, int tp_size, int files_per_rank) {
  const std::string partial = JoinPath(save_dir, PartialDirName(step, 0));
  if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
    return ErrnoStatus("mkdir", partial, errno);
  std::vector<ShardResult> results;
  for (int r = 0; r < tp_size; ++r) {
    ShardResult res;
    res.rank = r;
    res.ok = true;
    for (int i = 0; i < files_per_rank; ++i) {
      HostTensor w = ZerosTensor(DType::kF32, {16});
      float* p = reinterpret_cast<float*>(w.data.data());
      for (int k = 0; k < 16; ++k) p[k] = static_cast<float>(step * 1000 + r * 100 + i);
      const std::string file = ShardFileName(r, 0, i, files_per_rank);
      MT_ASSIGN_OR_RETURN(
          FileDigest d,
          WriteSafetensors(JoinPath(partial, file), {ViewOf(absl::StrCat("model.w", i), w)},
                           {{"format", kShardFormatName},
                            {"tp_rank", std::to_string(r)},
                            {"tp_size", std::to_string(tp_size)},
                            {"pp_rank", "0"},
                            {"split.model.w" + std::to_string(i), "0"}}));
      res.files.push_back({file, d.size, d.sha256});
    }
    MT_ASSIGN_OR_RETURN(ShardResult parsed, ParseShardResult(SerializeShardResult(res)));
    results.push_back(parsed);
  }
  mt::v1::CheckpointManifest base;
  base.set_step(step);
  base.mutable_layout()->set_tensor_model_parallel_size(tp_size);
  return CommitCheckpoint(save_dir, partial, base, results).status();
}

float FirstFloat(const HostTensor& t) {
  float f = 0;
  std::memcpy(&f, t.data.data(), 4);
  return f;
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
  EXPECT_EQ(ShardFileName(1, 2, 0, 1), "mp_rank_01_002.safetensors");
  EXPECT_EQ(ShardFileName(1, 2, 2, 4), "mp_rank_01_002-00003-of-00004.safetensors");
  EXPECT_THAT(ParseShardResult("ok\t0\t../../etc/passwd\t1\tab"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CheckpointDirTest, CommitWritesManifestThenLatest) {
  const std::string dir = testutil::MakeTempDir("ckd");
  MT_ASSERT_OK(SaveSynthetic(dir, 10, 2, 64));
  MT_ASSERT_OK_AND_ASSIGN(int64_t latest, ReadLatest(dir));
  EXPECT_EQ(latest, 10);
  EXPECT_THAT(Entries(dir), ElementsAre("iter_0000010", kLatestFile));
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, ReadManifest(dir + "/iter_0000010"));
  EXPECT_EQ(m.format(), "mt-checkpoint");
  EXPECT_EQ(m.format_version(), kFormatVersion);
  EXPECT_EQ(m.format_version(), 2);
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
  const std::string dir = testutil::MakeTempDir("ckd");
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
  EXPECT_THAT(ChooseCheckpoint(testutil::MakeTempDir("ckd")),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(CheckpointDirTest, AFailedRankLeavesLatestAndThePreviousCheckpoint) {
  const std::string dir = testutil::MakeTempDir("ckd");
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
  const std::string dir = testutil::MakeTempDir("ckd");
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
  const std::string dir = testutil::MakeTempDir("ckd");
  // How long one save takes on this machine: the kills land within the next ~4 saves, so that
  // most rounds are cut short whatever the machine's speed.
  const std::string probe = testutil::MakeTempDir("ckd");
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
  // The window adapts: a round that got through more than 3 saves (the probe overestimated a
  // save, e.g. on a loaded machine) halves it, a round with no progress widens it.
  int64_t window_us = 4 * save_us;
  for (int round = 0; round < 400 && latest < 50; ++round) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int64_t step = latest + 1; step <= 50; ++step) {
        if (!SaveSynthetic(dir, step, 2, 1 << 16).ok()) ::_exit(1);  // 256 KiB per shard
      }
      ::_exit(0);
    }
    ::usleep(static_cast<useconds_t>(std::uniform_int_distribution<int64_t>(0, window_us)(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) ++kills;
    auto l = ReadLatest(dir);
    if (!l.ok()) {
      ASSERT_TRUE(absl::IsNotFound(l.status())) << l.status();
      window_us = window_us * 3 / 2;
      continue;
    }
    ASSERT_GE(*l, latest);
    if (*l - latest > 3) window_us = std::max<int64_t>(100, window_us / 2);
    if (*l == latest) window_us = window_us * 3 / 2;
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

// Table: how a shard's tensors (byte sizes, in order) are split into files.
TEST(CheckpointDirTest, SplitIntoFilesBoundsAndBalancesTheFiles) {
  using Groups = std::vector<std::vector<size_t>>;
  struct Case {
    std::vector<uint64_t> sizes;
    int64_t max;
    Groups want;
  };
  const std::vector<Case> cases = {
      {{}, 100, {}},
      {{10, 20, 30}, 0, {{0, 1, 2}}},    // no bound: one file
      {{10, 20, 30}, 100, {{0, 1, 2}}},  // fits
      {{50, 50, 50, 50}, 100, {{0, 1}, {2, 3}}},
      {{60, 60, 60}, 100, {{0}, {1}, {2}}},  // 2 would not fit
      {{250, 10, 10}, 100, {{0}, {1, 2}}},   // a tensor over the bound gets its own file
      // Balanced: 300 bytes under a 200 bound = 2 files of ~150, not 200 + 100.
      {{50, 50, 50, 50, 50, 50}, 200, {{0, 1, 2}, {3, 4, 5}}},
      {{0, 0, 5}, 1, {{0, 1, 2}}},  // empty tensors never make a file of their own
  };
  for (const Case& c : cases) {
    const Groups got = SplitIntoFiles(c.sizes, c.max);
    EXPECT_EQ(got, c.want) << "sizes " << c.sizes.size() << " max " << c.max;
    for (const auto& g : got) {
      uint64_t bytes = 0, largest = 0;
      for (size_t i : g) {
        bytes += c.sizes[i];
        largest = std::max(largest, c.sizes[i]);
      }
      EXPECT_TRUE(c.max <= 0 || bytes <= static_cast<uint64_t>(c.max) || bytes == largest);
    }
  }
}

// Results travel as strings: several files, none, and version 1's one-file form.
TEST(CheckpointDirTest, ShardResultsRoundTrip) {
  ShardResult r;
  r.rank = 3;
  r.ok = true;
  r.files = {{"a-00001-of-00002.safetensors", 10, "ab"}, {"a-00002-of-00002.safetensors", 7, "cd"}};
  MT_ASSERT_OK_AND_ASSIGN(ShardResult back, ParseShardResult(SerializeShardResult(r)));
  EXPECT_EQ(back.rank, 3);
  EXPECT_TRUE(back.ok);
  ASSERT_EQ(back.AllFiles().size(), 2u);
  EXPECT_EQ(back.AllFiles()[1].file, "a-00002-of-00002.safetensors");
  EXPECT_EQ(back.AllFiles()[1].size, 7);
  EXPECT_EQ(back.AllFiles()[1].sha256, "cd");
  MT_ASSERT_OK_AND_ASSIGN(ShardResult v1,
                          ParseShardResult("ok\t1\tmp_rank_00_000.safetensors\t5\tef"));
  ASSERT_EQ(v1.AllFiles().size(), 1u);
  EXPECT_EQ(v1.AllFiles()[0].size, 5);
  MT_ASSERT_OK_AND_ASSIGN(ShardResult none, ParseShardResult("ok\t2\t\t0\t"));  // a DP replica
  EXPECT_TRUE(none.ok);
  EXPECT_TRUE(none.AllFiles().empty());
  ShardResult nothing;
  nothing.ok = true;
  MT_ASSERT_OK_AND_ASSIGN(none, ParseShardResult(SerializeShardResult(nothing)));
  EXPECT_TRUE(none.AllFiles().empty());
  MT_ASSERT_OK_AND_ASSIGN(ShardResult err, ParseShardResult("error\t4\tdisk\tfull"));
  EXPECT_FALSE(err.ok);
  EXPECT_EQ(err.error, "disk\tfull");
  EXPECT_THAT(ParseShardResult("ok\t0\ta\t1\tab\tb\t2"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Version 2: ranks with several files each. The manifest lists every file and points every
// tensor at its own; verification covers them all; the reader assembles TP slices across them.
TEST(CheckpointDirTest, ShardsSplitOverSeveralFilesCommitAndLoad) {
  const std::string dir = testutil::MakeTempDir("ckd");
  MT_ASSERT_OK(SaveSplit(dir, 10, 2, 3));
  const std::string cdir = dir + "/iter_0000010";
  EXPECT_THAT(Entries(cdir),
              ElementsAre("manifest.json", "mp_rank_00_000-00001-of-00003.safetensors",
                          "mp_rank_00_000-00002-of-00003.safetensors",
                          "mp_rank_00_000-00003-of-00003.safetensors",
                          "mp_rank_01_000-00001-of-00003.safetensors",
                          "mp_rank_01_000-00002-of-00003.safetensors",
                          "mp_rank_01_000-00003-of-00003.safetensors"));
  MT_ASSERT_OK_AND_ASSIGN(mt::v1::CheckpointManifest m, ReadManifest(cdir));
  EXPECT_EQ(m.files_size(), 6);
  ASSERT_EQ(m.tensors_size(), 6);
  for (const auto& t : m.tensors()) {
    EXPECT_EQ(t.file(), ShardFileName(t.tp_rank(), 0, t.name().back() - '0', 3)) << t.name();
  }
  EXPECT_THAT(VerifyCheckpointFiles(cdir, m), IsEmpty());
  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenCheckpointSource(cdir, m));
  MT_ASSERT_OK_AND_ASSIGN(HostTensor w2, source->Full("model.w2"));
  EXPECT_EQ(w2.shape, (std::vector<int64_t>{32}));
  EXPECT_EQ(FirstFloat(w2), 10 * 1000 + 2);
  MT_ASSERT_OK_AND_ASSIGN(HostTensor rank1, SliceAlong(w2, 0, 16, 16));
  EXPECT_EQ(FirstFloat(rank1), 10 * 1000 + 100 + 2);
  // One damaged file of six is found by name.
  FlipOneBit(cdir + "/mp_rank_01_000-00002-of-00003.safetensors", 100);
  EXPECT_THAT(VerifyCheckpointFiles(cdir, m, /*threads=*/3),
              ElementsAre("mp_rank_01_000-00002-of-00003.safetensors: sha256 mismatch"));
}

// The load's one pass: the files `keep` selects are held in memory with the bytes that were
// verified, and the source restores from them (the files on disk are gone by then); a damaged
// newest checkpoint falls back, keeping the files of the one chosen.
TEST(CheckpointDirTest, ChooseKeepsTheVerifiedFilesAndTheSourceReadsThem) {
  const std::string dir = testutil::MakeTempDir("ckd");
  MT_ASSERT_OK(SaveSplit(dir, 5, 2, 2));
  MT_ASSERT_OK(SaveSplit(dir, 10, 2, 2));
  FlipOneBit(dir + "/iter_0000010/mp_rank_00_000-00001-of-00002.safetensors", 90);
  ChooseOptions options;
  options.threads = 2;
  std::vector<std::string> asked;
  options.keep = [&](const mt::v1::CheckpointManifest& m, const mt::v1::CheckpointFile& f) {
    asked.push_back(absl::StrCat(m.step(), ":", f.path()));
    return absl::StartsWith(f.path(), "mp_rank_01_");  // TP rank 1's files
  };
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice c, ChooseCheckpoint(dir, options));
  EXPECT_EQ(c.manifest.step(), 5);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_THAT(c.problems[0], HasSubstr("iter_0000010: mp_rank_00_000-00001-of-00002"));
  EXPECT_EQ(asked.size(), 8u);  // both candidates' four files
  int64_t total = 0;
  for (const auto& f : c.manifest.files()) total += f.size_bytes();
  EXPECT_EQ(c.bytes_read, 2 * total);  // each candidate's files, read once (same sizes)
  ASSERT_NE(c.files, nullptr);
  EXPECT_EQ(c.files->size(), 2u);
  ASSERT_NE(c.files->Find("mp_rank_01_000-00002-of-00002.safetensors"), nullptr);
  EXPECT_EQ(c.files->Find("mp_rank_00_000-00002-of-00002.safetensors"), nullptr);
  MT_ASSERT_OK_AND_ASSIGN(std::string on_disk,
                          ReadFile(c.dir + "/mp_rank_01_000-00002-of-00002.safetensors"));
  EXPECT_TRUE(c.files->Find("mp_rank_01_000-00002-of-00002.safetensors")->view() == on_disk);

  // A bound on the memory: nothing kept past it, the choice is the same.
  ChooseOptions bounded_options = options;
  bounded_options.max_keep_bytes = 1;
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice bounded,
                          ChooseCheckpoint(dir + "/iter_0000005", bounded_options));
  EXPECT_EQ(bounded.files, nullptr);
  EXPECT_EQ(bounded.manifest.step(), 5);

  MT_ASSERT_OK_AND_ASSIGN(auto source, OpenCheckpointSource(c.dir, c.manifest, c.files));
  for (const char* f :
       {"mp_rank_01_000-00001-of-00002.safetensors", "mp_rank_01_000-00002-of-00002.safetensors"}) {
    ASSERT_EQ(::unlink((c.dir + "/" + f).c_str()), 0);
  }
  SliceRequest rank1;
  rank1.split_dim = 0;
  rank1.tp_rank = 1;
  rank1.tp_size = 2;
  rank1.shape = {16};
  MT_ASSERT_OK_AND_ASSIGN(HostTensor w1, source->Slice("model.w1", rank1));
  EXPECT_EQ(FirstFloat(w1), 5 * 1000 + 100 + 1);
  // Rank 0's slice was not kept: it comes from its file.
  rank1.tp_rank = 0;
  MT_ASSERT_OK_AND_ASSIGN(HostTensor w0, source->Slice("model.w1", rank1));
  EXPECT_EQ(FirstFloat(w0), 5 * 1000 + 1);
}

// Version 1 directories (one file per rank, format_version 1, as mt wrote them before the
// split) still load: the fixture writes one the way the version 1 writer did.
TEST(CheckpointDirTest, ReadsAVersion1Checkpoint) {
  const std::string dir = testutil::MakeTempDir("ckd");
  const std::string cdir = dir + "/iter_0000007";
  ASSERT_EQ(::mkdir(cdir.c_str(), 0755), 0);
  HostTensor w = ZerosTensor(DType::kF32, {2, 4});
  float* p = reinterpret_cast<float*>(w.data.data());
  for (int i = 0; i < 8; ++i) p[i] = 0.25f * static_cast<float>(i);
  MT_ASSERT_OK_AND_ASSIGN(
      FileDigest d, WriteSafetensors(cdir + "/mp_rank_00_000.safetensors", {ViewOf("model.w", w)},
                                     {{"format", "mt-shard"},
                                      {"format_version", "1"},
                                      {"tp_rank", "0"},
                                      {"tp_size", "1"},
                                      {"pp_rank", "0"},
                                      {"step", "7"},
                                      {"rank", "0"}}));
  const std::string manifest = absl::StrCat(
      "{\n \"format\": \"mt-checkpoint\",\n \"format_version\": 1,\n \"job_id\": \"old\",\n"
      " \"step\": \"7\",\n \"consumed_samples\": \"56\",\n \"loss\": 3.5,\n"
      " \"layout\": {\"world_size\": 1, \"tensor_model_parallel_size\": 1},\n"
      " \"tensors\": [{\"name\": \"model.w\", \"file\": \"mp_rank_00_000.safetensors\",\n"
      "   \"dtype\": \"F32\", \"shape\": [\"2\", \"4\"], \"full_shape\": [\"2\", \"4\"],\n"
      "   \"split_dim\": -1, \"tp_rank\": 0, \"tp_size\": 1, \"pp_rank\": 0}],\n"
      " \"files\": [{\"path\": \"mp_rank_00_000.safetensors\", \"size_bytes\": \"",
      d.size, "\", \"sha256\": \"", d.sha256, "\"}]\n}\n");
  MT_ASSERT_OK(WriteFileAtomically(cdir + "/manifest.json", manifest));
  MT_ASSERT_OK(WriteLatest(dir, 7));
  ChooseOptions options;
  options.keep = [](const mt::v1::CheckpointManifest&, const mt::v1::CheckpointFile&) {
    return true;
  };
  MT_ASSERT_OK_AND_ASSIGN(LoadChoice c, ChooseCheckpoint(dir, options));
  EXPECT_EQ(c.manifest.format_version(), 1);
  EXPECT_EQ(c.manifest.step(), 7);
  EXPECT_EQ(c.manifest.loss(), 3.5);
  EXPECT_EQ(c.bytes_read, d.size);
  for (auto files : {c.files, std::shared_ptr<const InMemoryFiles>()}) {
    MT_ASSERT_OK_AND_ASSIGN(auto source, OpenCheckpointSource(c.dir, c.manifest, files));
    MT_ASSERT_OK_AND_ASSIGN(HostTensor back, source->Full("model.w"));
    EXPECT_EQ(back.shape, (std::vector<int64_t>{2, 4}));
    EXPECT_TRUE(back.data == w.data);
  }
}

}  // namespace
}  // namespace mt::checkpoint
