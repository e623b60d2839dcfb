#include "worker/data/data_loader.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

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

// Sample i is {i, i + 1, ..., i + 4}; index `fail_at` fails to read.
class CountingDataset : public SampleDataset {
 public:
  explicit CountingDataset(int64_t size, int64_t fail_at = -1) : size_(size), fail_at_(fail_at) {}
  int64_t size() const override { return size_; }
  int64_t sample_length() const override { return 5; }
  absl::Status Read(int64_t index, int32_t* out) const override {
    reads_.fetch_add(1);
    if (index == fail_at_) return absl::DataLossError("bad sample");
    if (index < 0 || index >= size_) return absl::OutOfRangeError("index");
    for (int j = 0; j < 5; ++j) out[j] = static_cast<int32_t>(index + j);
    return absl::OkStatus();
  }
  const std::string& description() const override { return description_; }
  int64_t reads() const { return reads_.load(); }

 private:
  int64_t size_;
  int64_t fail_at_;
  std::string description_ = "counting";
  mutable std::atomic<int64_t> reads_{0};
};

DataLoaderOptions Options(int64_t micro, int64_t global, int64_t rank, int64_t dp,
                          int64_t consumed = 0, int workers = 0) {
  DataLoaderOptions o;
  o.micro_batch_size = micro;
  o.global_batch_size = global;
  o.data_parallel_rank = rank;
  o.data_parallel_size = dp;
  o.consumed_samples = consumed;
  o.num_workers = workers;
  o.prefetch_micro_batches = 2;
  return o;
}

// All micro-batches a loader yields, as the dataset indices of their rows.
std::vector<std::vector<int64_t>> Drain(DataLoader* loader) {
  std::vector<std::vector<int64_t>> out;
  while (true) {
    absl::StatusOr<MicroBatch> mb = loader->Next();
    if (!mb.ok()) {
      EXPECT_THAT(mb, StatusIs(absl::StatusCode::kOutOfRange));
      break;
    }
    EXPECT_EQ(mb->tokens.size(), static_cast<size_t>(mb->batch_size * mb->sample_length));
    for (int64_t r = 0; r < mb->batch_size; ++r) {
      for (int64_t j = 0; j < mb->sample_length; ++j) {
        EXPECT_EQ(mb->tokens[r * mb->sample_length + j], mb->sample_indices[r] + j);
      }
    }
    out.push_back(mb->sample_indices);
  }
  return out;
}

TEST(DataLoaderTest, FollowsMegatronPretrainingSampler) {
  auto ds = std::make_shared<CountingDataset>(23);
  MT_ASSERT_OK_AND_ASSIGN(auto rank1, DataLoader::Create(ds, Options(2, 8, 1, 2)));
  EXPECT_EQ(rank1->micro_batches_per_step(), 2);
  // Chunks of micro * dp = 4 from 0: rank 1 takes [2, 4) of each; 23 samples hold 5 full chunks.
  EXPECT_THAT(Drain(rank1.get()),
              ElementsAre(ElementsAre(2, 3), ElementsAre(6, 7), ElementsAre(10, 11),
                          ElementsAre(14, 15), ElementsAre(18, 19)));
  EXPECT_EQ(rank1->consumed_samples(), 20);
}

TEST(DataLoaderTest, DataParallelRanksTogetherSeeWhatOneRankSees) {
  auto ds = std::make_shared<CountingDataset>(100);
  // One rank: micro 2, global 8 (4 micro-batches per step).
  MT_ASSERT_OK_AND_ASSIGN(auto single, DataLoader::Create(ds, Options(2, 8, 0, 1)));
  const auto one = Drain(single.get());
  // Two ranks, same micro and global batch (2 micro-batches each per step).
  MT_ASSERT_OK_AND_ASSIGN(auto r0, DataLoader::Create(ds, Options(2, 8, 0, 2)));
  MT_ASSERT_OK_AND_ASSIGN(auto r1, DataLoader::Create(ds, Options(2, 8, 1, 2)));
  const auto zero = Drain(r0.get()), first = Drain(r1.get());
  ASSERT_EQ(zero.size(), first.size());
  // Step by step, rank 0's and rank 1's micro-batches interleaved are the single rank's.
  std::vector<std::vector<int64_t>> merged;
  for (size_t k = 0; k < zero.size(); ++k) {
    merged.push_back(zero[k]);
    merged.push_back(first[k]);
  }
  EXPECT_EQ(merged, one);
  // And each global batch of 8 is [8 s, 8 s + 8) over both ranks.
  for (size_t step = 0; step < zero.size() / 2; ++step) {
    std::vector<int64_t> batch;
    for (size_t k = 2 * step; k < 2 * step + 2; ++k) {
      batch.insert(batch.end(), zero[k].begin(), zero[k].end());
      batch.insert(batch.end(), first[k].begin(), first[k].end());
    }
    std::sort(batch.begin(), batch.end());
    for (int i = 0; i < 8; ++i) EXPECT_EQ(batch[i], static_cast<int64_t>(8 * step + i));
  }
}

TEST(DataLoaderTest, ResumeFromConsumedSamplesEqualsAStraightRun) {
  auto ds = std::make_shared<CountingDataset>(200);
  for (int64_t rank : {0, 1, 2}) {
    MT_ASSERT_OK_AND_ASSIGN(auto straight, DataLoader::Create(ds, Options(3, 18, rank, 3)));
    const auto all = Drain(straight.get());
    const int64_t steps_done = 4;
    const int64_t per_step = 2;  // 18 / (3 * 3)
    MT_ASSERT_OK_AND_ASSIGN(auto resumed,
                            DataLoader::Create(ds, Options(3, 18, rank, 3, steps_done * 18)));
    const auto rest = Drain(resumed.get());
    ASSERT_EQ(rest.size() + steps_done * per_step, all.size());
    EXPECT_TRUE(std::equal(rest.begin(), rest.end(), all.begin() + steps_done * per_step));
  }
}

TEST(DataLoaderTest, WorkersGiveTheSameBatchesInOrder) {
  auto ds = std::make_shared<CountingDataset>(1000);
  MT_ASSERT_OK_AND_ASSIGN(auto plain, DataLoader::Create(ds, Options(4, 32, 1, 4, 64)));
  const auto want = Drain(plain.get());
  for (int workers : {1, 3}) {
    MT_ASSERT_OK_AND_ASSIGN(auto threaded,
                            DataLoader::Create(ds, Options(4, 32, 1, 4, 64, workers)));
    EXPECT_EQ(threaded->total_micro_batches(), static_cast<int64_t>(want.size()));
    EXPECT_EQ(Drain(threaded.get()), want);
    EXPECT_EQ(threaded->returned_micro_batches(), static_cast<int64_t>(want.size()));
  }
}

TEST(DataLoaderTest, PrefetchIsBoundedAndStopsCleanly) {
  auto ds = std::make_shared<CountingDataset>(10000);
  DataLoaderOptions o = Options(2, 2, 0, 1, 0, 2);
  o.prefetch_micro_batches = 3;
  {
    MT_ASSERT_OK_AND_ASSIGN(auto loader, DataLoader::Create(ds, o));
    MT_ASSERT_OK(loader->Next().status());
    // Workers read ahead at most 3 micro-batches past the one returned. Give them a moment.
    for (int i = 0; i < 200 && ds->reads() < 2 * 4; ++i) absl::SleepFor(absl::Milliseconds(1));
    absl::SleepFor(absl::Milliseconds(20));
    EXPECT_LE(ds->reads(), 2 * 4);
  }  // destroyed with work outstanding: joins without hanging
}

TEST(DataLoaderTest, ReadErrorsArriveInTheirTurn) {
  auto ds = std::make_shared<CountingDataset>(40, /*fail_at=*/13);
  for (int workers : {0, 2}) {
    MT_ASSERT_OK_AND_ASSIGN(auto loader, DataLoader::Create(ds, Options(2, 4, 0, 2, 0, workers)));
    // Rank 0 reads [0,2), [4,6), [8,10), [12,14): the fourth holds sample 13.
    for (int i = 0; i < 3; ++i) MT_ASSERT_OK(loader->Next().status());
    EXPECT_THAT(loader->Next(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad sample")));
    MT_EXPECT_OK(loader->Next().status());  // later batches are unaffected
  }
}

TEST(DataLoaderTest, RejectsBadOptions) {
  auto ds = std::make_shared<CountingDataset>(100);
  EXPECT_THAT(DataLoader::Create(nullptr, Options(1, 1, 0, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DataLoader::Create(ds, Options(0, 1, 0, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DataLoader::Create(ds, Options(2, 8, 2, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DataLoader::Create(ds, Options(2, 6, 0, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("multiple")));
  EXPECT_THAT(DataLoader::Create(ds, Options(2, 8, 0, 2, 6)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("consumed")));
  EXPECT_THAT(DataLoader::Create(ds, Options(2, 8, 0, 2, 104)),
              StatusIs(absl::StatusCode::kOutOfRange));
  // global 0 = micro * dp
  MT_ASSERT_OK_AND_ASSIGN(auto loader, DataLoader::Create(ds, Options(2, 0, 0, 2)));
  EXPECT_EQ(loader->micro_batches_per_step(), 1);
}

TEST(DataLoaderTest, LoadsRealGptSamples) {
  const std::string dir = testutil::MakeTempDir("worker_data");
  ASSERT_FALSE(dir.empty());
  std::vector<int32_t> lengths(50);
  for (int i = 0; i < 50; ++i) lengths[i] = 10 + (i * 13) % 37;
  testing::WriteDataset(dir + "/c", lengths);
  GPTDataConfig c;
  c.blend.prefixes = {dir + "/c"};
  c.split = "1";
  c.seq_length = 8;
  MT_ASSERT_OK_AND_ASSIGN(GPTDatasets ds, BuildGPTDatasets(c, {64, 0, 0}));
  MT_ASSERT_OK_AND_ASSIGN(auto loader, DataLoader::Create(ds.train, Options(4, 8, 1, 2, 8)));
  MT_ASSERT_OK_AND_ASSIGN(MicroBatch mb, loader->Next());
  EXPECT_EQ(mb.batch_size, 4);
  EXPECT_EQ(mb.sample_length, 9);
  EXPECT_THAT(mb.sample_indices, ElementsAre(12, 13, 14, 15));
  EXPECT_EQ(mb.consumed_samples, 16);
  for (int r = 0; r < 4; ++r) {
    MT_ASSERT_OK_AND_ASSIGN(auto s, ds.train->Sample(12 + r));
    EXPECT_TRUE(std::equal(s.begin(), s.end(), mb.tokens.begin() + 9 * r));
  }
}

}  // namespace
}  // namespace mt::data
