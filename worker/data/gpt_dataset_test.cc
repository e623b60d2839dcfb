#include "worker/data/gpt_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
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
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::TokenOf;
using testing::WriteDataset;

std::vector<int32_t> Lengths(int n, uint32_t seed, int max_len = 60) {
  std::mt19937 gen(seed);
  std::vector<int32_t> out(n);
  for (auto& l : out) l = (gen() % 7 == 0) ? 0 : 1 + static_cast<int32_t>(gen() % max_len);
  return out;
}

class GPTDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::MakeTempDir("worker_data");
    ASSERT_FALSE(dir_.empty());
    prefix_ = dir_ + "/corpus";
    lengths_ = Lengths(80, 1);
    WriteDataset(prefix_, lengths_);
    MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(prefix_));
    data_ = std::move(ds);
  }

  GPTDatasetOptions Options(int64_t num_samples, uint32_t seed = 1234) const {
    GPTDatasetOptions o;
    o.split = Split::kTrain;
    o.documents = {5, 70};
    o.num_samples = num_samples;
    o.seq_length = 32;
    o.seed = seed;
    o.cache_dir = dir_ + "/cache";
    return o;
  }

  // The tokens of the document index, concatenated: the stream samples are cut from.
  std::vector<int32_t> Stream(const GPTDataset& ds) const {
    std::vector<int32_t> out;
    for (int32_t d : ds.document_index()) {
      for (int32_t p = 0; p < lengths_[d]; ++p) out.push_back(TokenOf(d, p));
    }
    return out;
  }

  std::string dir_, prefix_;
  std::vector<int32_t> lengths_;
  std::shared_ptr<const IndexedDataset> data_;
};

TEST_F(GPTDatasetTest, SamplesAreConsecutiveWindowsOfTheShuffledStream) {
  for (int64_t want : {0, 10, 150, 333}) {  // one epoch, part of one, several epochs
    GPTDatasetOptions o = Options(want);
    o.use_cache = false;
    MT_ASSERT_OK_AND_ASSIGN(auto ds, GPTDataset::Create(data_, o));
    SCOPED_TRACE(want);
    EXPECT_EQ(ds->cache_outcome(), CacheOutcome::kDisabled);
    EXPECT_GE(ds->size(), want);
    EXPECT_EQ(ds->sample_length(), 33);
    const std::vector<int32_t> stream = Stream(*ds);
    std::vector<int32_t> prev;
    for (int64_t j = 0; j < ds->size(); ++j) {
      std::vector<int32_t> s(33);
      MT_ASSERT_OK(ds->ReadUnshuffled(j, s.data()));
      // Sample j is stream[32 j, 32 j + 33): exactly seq + 1 tokens ...
      ASSERT_THAT(s, ElementsAreArray(stream.begin() + 32 * j, stream.begin() + 32 * j + 33));
      // ... sharing exactly one token with the previous sample.
      if (!prev.empty()) {
        ASSERT_EQ(prev.back(), s.front());
      }
      prev = s;
    }
    // Together they cover the stream but for a tail shorter than a sample.
    EXPECT_LT(static_cast<int64_t>(stream.size()) - (32 * ds->size() + 1), 32);
    // Read(i) is the shuffled order.
    for (int64_t i = 0; i < ds->size(); i += 7) {
      MT_ASSERT_OK_AND_ASSIGN(auto a, ds->Sample(i));
      std::vector<int32_t> b(33);
      MT_ASSERT_OK(ds->ReadUnshuffled(ds->shuffle_index()[i], b.data()));
      EXPECT_EQ(a, b);
    }
    EXPECT_THAT(ds->Sample(ds->size()), StatusIs(absl::StatusCode::kOutOfRange));
    EXPECT_THAT(ds->Sample(-1), StatusIs(absl::StatusCode::kOutOfRange));
  }
}

TEST_F(GPTDatasetTest, OneEpochCoversEveryTokenOfTheSplit) {
  GPTDatasetOptions o = Options(0);
  o.use_cache = false;
  MT_ASSERT_OK_AND_ASSIGN(auto ds, GPTDataset::Create(data_, o));
  EXPECT_EQ(ds->plan().num_epochs, 1);
  std::multiset<int32_t> seen;
  for (int64_t j = 0; j < ds->size(); ++j) {
    MT_ASSERT_OK_AND_ASSIGN(auto s, ds->Sample(j));
    seen.insert(s.begin(), s.end() - 1);  // the last token is the next sample's first
  }
  std::multiset<int32_t> all;
  for (int d = 5; d < 70; ++d) {
    for (int p = 0; p < lengths_[d]; ++p) all.insert(TokenOf(d, p));
  }
  // Every token seen is the split's, seen once; only the tail (< seq + 1 tokens) is unseen.
  for (int32_t t : seen) ASSERT_EQ(all.count(t), 1u) << t;
  EXPECT_EQ(seen.size(), static_cast<size_t>(32 * ds->size()));
  EXPECT_LE(all.size() - seen.size(), 33u);
}

TEST_F(GPTDatasetTest, DeterministicFromTheSeed) {
  GPTDatasetOptions o = Options(200);
  o.use_cache = false;
  MT_ASSERT_OK_AND_ASSIGN(auto a, GPTDataset::Create(data_, o));
  MT_ASSERT_OK_AND_ASSIGN(auto b, GPTDataset::Create(data_, o));
  o.seed = 4321;
  MT_ASSERT_OK_AND_ASSIGN(auto c, GPTDataset::Create(data_, o));
  EXPECT_THAT(a->document_index(), ElementsAreArray(b->document_index()));
  EXPECT_THAT(a->sample_index(), ElementsAreArray(b->sample_index()));
  EXPECT_THAT(a->shuffle_index(), ElementsAreArray(b->shuffle_index()));
  for (int64_t i = 0; i < a->size(); ++i) ASSERT_EQ(a->Sample(i).value(), b->Sample(i).value());
  EXPECT_FALSE(std::equal(a->document_index().begin(), a->document_index().end(),
                          c->document_index().begin()));
  int differ = 0;
  for (int64_t i = 0; i < 20; ++i) differ += a->Sample(i).value() != c->Sample(i).value();
  EXPECT_GT(differ, 10);
}

TEST_F(GPTDatasetTest, CacheIsWrittenReadAndRebuiltWhenStaleOrDamaged) {
  MT_ASSERT_OK_AND_ASSIGN(auto first, GPTDataset::Create(data_, Options(200)));
  EXPECT_EQ(first->cache_outcome(), CacheOutcome::kBuiltAndSaved);
  EXPECT_THAT(first->cache_path(), HasSubstr(dir_ + "/cache/"));
  EXPECT_THAT(first->cache_path(), HasSubstr("-GPTDataset-train.mtidx"));
  struct stat st;
  ASSERT_EQ(::stat(first->cache_path().c_str(), &st), 0);

  MT_ASSERT_OK_AND_ASSIGN(auto second, GPTDataset::Create(data_, Options(200)));
  EXPECT_EQ(second->cache_outcome(), CacheOutcome::kLoaded);
  EXPECT_EQ(second->cache_path(), first->cache_path());
  EXPECT_THAT(second->document_index(), ElementsAreArray(first->document_index()));
  EXPECT_THAT(second->sample_index(), ElementsAreArray(first->sample_index()));
  EXPECT_THAT(second->shuffle_index(), ElementsAreArray(first->shuffle_index()));

  // Another seed or sample count: another file.
  MT_ASSERT_OK_AND_ASSIGN(auto seed2, GPTDataset::Create(data_, Options(200, 99)));
  EXPECT_EQ(seed2->cache_outcome(), CacheOutcome::kBuiltAndSaved);
  EXPECT_NE(seed2->cache_path(), first->cache_path());
  MT_ASSERT_OK_AND_ASSIGN(auto more, GPTDataset::Create(data_, Options(201)));
  EXPECT_EQ(more->cache_outcome(), CacheOutcome::kBuiltAndSaved);

  // A damaged file is rebuilt, to the same indices.
  MT_ASSERT_OK_AND_ASSIGN(std::string bytes, ReadFile(first->cache_path()));
  bytes[bytes.size() / 2] ^= 1;
  MT_ASSERT_OK(WriteFileAtomically(first->cache_path(), bytes));
  MT_ASSERT_OK_AND_ASSIGN(auto rebuilt, GPTDataset::Create(data_, Options(200)));
  EXPECT_EQ(rebuilt->cache_outcome(), CacheOutcome::kBuiltAndSaved);
  EXPECT_THAT(rebuilt->shuffle_index(), ElementsAreArray(first->shuffle_index()));
  MT_ASSERT_OK_AND_ASSIGN(auto reread, GPTDataset::Create(data_, Options(200)));
  EXPECT_EQ(reread->cache_outcome(), CacheOutcome::kLoaded);

  // A truncated file, and one written for other indices under this name, too.
  MT_ASSERT_OK(WriteFileAtomically(first->cache_path(), bytes.substr(0, 100)));
  MT_ASSERT_OK_AND_ASSIGN(auto again, GPTDataset::Create(data_, Options(200)));
  EXPECT_EQ(again->cache_outcome(), CacheOutcome::kBuiltAndSaved);
  MT_ASSERT_OK_AND_ASSIGN(std::string other, ReadFile(seed2->cache_path()));
  MT_ASSERT_OK(WriteFileAtomically(first->cache_path(), other));
  MT_ASSERT_OK_AND_ASSIGN(auto foreign, GPTDataset::Create(data_, Options(200)));
  EXPECT_EQ(foreign->cache_outcome(), CacheOutcome::kBuiltAndSaved);
  EXPECT_THAT(foreign->shuffle_index(), ElementsAreArray(first->shuffle_index()));
}

TEST_F(GPTDatasetTest, CacheKeyFollowsTheDocumentLengthsNotThePath) {
  // The same lengths elsewhere share the cache; other lengths do not.
  const std::string copy = dir_ + "/copy";
  WriteDataset(copy, lengths_);
  std::vector<int32_t> changed = lengths_;
  changed[20] += 1;
  const std::string other = dir_ + "/other";
  WriteDataset(other, changed);
  MT_ASSERT_OK_AND_ASSIGN(auto a, GPTDataset::Create(data_, Options(50)));
  MT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<const IndexedDataset> copy_data,
                          IndexedDataset::Create(copy));
  MT_ASSERT_OK_AND_ASSIGN(auto b, GPTDataset::Create(copy_data, Options(50)));
  EXPECT_EQ(b->cache_outcome(), CacheOutcome::kLoaded);
  MT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<const IndexedDataset> other_data,
                          IndexedDataset::Create(other));
  MT_ASSERT_OK_AND_ASSIGN(auto c, GPTDataset::Create(other_data, Options(50)));
  EXPECT_EQ(c->cache_outcome(), CacheOutcome::kBuiltAndSaved);
  EXPECT_NE(c->cache_path(), a->cache_path());
}

TEST_F(GPTDatasetTest, UnwritableCacheStillBuilds) {
  MT_ASSERT_OK(WriteFileAtomically(dir_ + "/plainfile", "x"));
  GPTDatasetOptions o = Options(20);
  o.cache_dir = dir_ + "/plainfile/cache";
  MT_ASSERT_OK_AND_ASSIGN(auto ds, GPTDataset::Create(data_, o));
  EXPECT_EQ(ds->cache_outcome(), CacheOutcome::kBuiltNotSaved);
  EXPECT_GE(ds->size(), 20);
}

TEST_F(GPTDatasetTest, DefaultCacheDirIsNextToTheData) {
  EXPECT_EQ(DefaultCacheDir("/data/web/corpus_text_document"), "/data/web/cache");
  EXPECT_EQ(DefaultCacheDir("corpus"), "cache");
  GPTDatasetOptions o = Options(20);
  o.cache_dir.clear();
  MT_ASSERT_OK_AND_ASSIGN(auto ds, GPTDataset::Create(data_, o));
  EXPECT_EQ(ds->cache_path().rfind(dir_ + "/cache/", 0), 0u) << ds->cache_path();
}

TEST_F(GPTDatasetTest, ReadsUInt16Datasets) {
  const std::string prefix = dir_ + "/small";
  WriteDataset(prefix, lengths_, DType::kUInt16);
  MT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<const IndexedDataset> data,
                          IndexedDataset::Create(prefix));
  GPTDatasetOptions o = Options(30);
  o.use_cache = false;
  MT_ASSERT_OK_AND_ASSIGN(auto ds, GPTDataset::Create(data, o));
  MT_ASSERT_OK_AND_ASSIGN(auto s, ds->Sample(0));
  std::vector<int32_t> u(33);
  MT_ASSERT_OK(ds->ReadUnshuffled(ds->shuffle_index()[0], u.data()));
  EXPECT_EQ(s, u);
  // Position 0 of the stream is the first document's first token.
  MT_ASSERT_OK(ds->ReadUnshuffled(0, u.data()));
  int32_t first_doc = -1;
  for (int32_t d : ds->document_index()) {
    if (lengths_[d] > 0) {
      first_doc = d;
      break;
    }
  }
  EXPECT_EQ(u[0], TokenOf(first_doc, 0, DType::kUInt16));
}

TEST_F(GPTDatasetTest, RejectsBadOptions) {
  GPTDatasetOptions o = Options(10);
  o.documents = {70, 90};
  EXPECT_THAT(GPTDataset::Create(data_, o), StatusIs(absl::StatusCode::kInvalidArgument));
  o = Options(10);
  o.seq_length = 1;
  EXPECT_THAT(GPTDataset::Create(data_, o), StatusIs(absl::StatusCode::kInvalidArgument));
  o = Options(10);
  o.documents = {3, 3};  // no tokens
  EXPECT_THAT(GPTDataset::Create(data_, o),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("train split")));
  EXPECT_THAT(GPTDataset::Create(nullptr, Options(10)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Samples 0, 37 and 55 of Megatron's GPTDataset (its code run in Python with numpy 1.24) for
// documents [0, 30) of lengths 5 + (7 i mod 11), seq_length 16, 50 samples, seed 1234: three
// epochs, the last shuffled separately. Tokens are doc * 10000 + position.
TEST(GPTDatasetMegatronTest, SamplesEqualMegatrons) {
  const std::string dir = testutil::MakeTempDir("worker_data");
  ASSERT_FALSE(dir.empty());
  std::vector<int32_t> lengths(40);
  for (int i = 0; i < 40; ++i) lengths[i] = 5 + (i * 7) % 11;
  WriteDataset(dir + "/golden", lengths);
  MT_ASSERT_OK_AND_ASSIGN(std::shared_ptr<const IndexedDataset> data,
                          IndexedDataset::Create(dir + "/golden"));
  GPTDatasetOptions o;
  o.documents = {0, 30};
  o.num_samples = 50;
  o.seq_length = 16;
  o.seed = 1234;
  o.cache_dir = dir + "/cache";
  MT_ASSERT_OK_AND_ASSIGN(auto ds, GPTDataset::Create(data, o));
  EXPECT_EQ(ds->plan().num_epochs, 3);
  EXPECT_TRUE(ds->plan().separate_final_epoch);
  EXPECT_EQ(ds->size(), 56);
  const std::vector<int32_t> want0 = {250000, 250001, 250002, 250003, 250004, 250005,
                                      250006, 250007, 250008, 250009, 250010, 250011,
                                      250012, 250013, 250014, 120000, 120001};
  const std::vector<int32_t> want37 = {150003, 150004, 150005, 150006, 150007, 150008,
                                       150009, 150010, 190000, 190001, 190002, 190003,
                                       190004, 190005, 260000, 260001, 260002};
  const std::vector<int32_t> want55 = {40005, 40006, 40007, 40008, 40009, 40010,
                                       70000, 70001, 70002, 70003, 70004, 70005,
                                       70006, 70007, 70008, 70009, 250000};
  for (int pass = 0; pass < 2; ++pass) {  // built, then loaded from the cache
    EXPECT_EQ(ds->cache_outcome(),
              pass == 0 ? CacheOutcome::kBuiltAndSaved : CacheOutcome::kLoaded);
    EXPECT_EQ(ds->Sample(0).value(), want0);
    EXPECT_EQ(ds->Sample(37).value(), want37);
    EXPECT_EQ(ds->Sample(55).value(), want55);
    MT_ASSERT_OK_AND_ASSIGN(ds, GPTDataset::Create(data, o));
  }
}

// ----- blending -----

class FixedDataset : public SampleDataset {
 public:
  FixedDataset(int id, int64_t size) : id_(id), size_(size), description_(std::to_string(id)) {}
  int64_t size() const override { return size_; }
  int64_t sample_length() const override { return 3; }
  absl::Status Read(int64_t index, int32_t* out) const override {
    if (index < 0 || index >= size_) return absl::OutOfRangeError("index");
    out[0] = id_;
    out[1] = static_cast<int32_t>(index);
    out[2] = -1;
    return absl::OkStatus();
  }
  const std::string& description() const override { return description_; }

 private:
  int id_;
  int64_t size_;
  std::string description_;
};

TEST(BlendedDatasetTest, DrawsExactCountsInGreedyOrder) {
  std::vector<std::shared_ptr<const SampleDataset>> parts = {
      std::make_shared<FixedDataset>(0, 302), std::make_shared<FixedDataset>(1, 704)};
  MT_ASSERT_OK_AND_ASSIGN(auto blend, BlendedDataset::Create(parts, {0.3, 0.7}, 1000));
  EXPECT_EQ(blend->size(), 1000);
  EXPECT_EQ(blend->cache_outcome(), CacheOutcome::kDisabled);
  std::vector<int64_t> next(2, 0);
  for (int64_t i = 0; i < 1000; ++i) {
    MT_ASSERT_OK_AND_ASSIGN(auto s, blend->Sample(i));
    EXPECT_EQ(s[0], blend->dataset_index()[i]);
    EXPECT_EQ(s[1], next[s[0]]++) << "each dataset is read in order";
  }
  EXPECT_EQ(next[0], 300);
  EXPECT_EQ(next[1], 700);
}

TEST(BlendedDatasetTest, FailsWhenADatasetIsTooSmall) {
  std::vector<std::shared_ptr<const SampleDataset>> parts = {
      std::make_shared<FixedDataset>(0, 299), std::make_shared<FixedDataset>(1, 704)};
  EXPECT_THAT(BlendedDataset::Create(parts, {0.3, 0.7}, 1000),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("only 299")));
  EXPECT_THAT(BlendedDataset::Create(parts, {0.3}, 1000),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BlendedDataset::Create(parts, {0, 0}, 10),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(BlendedDatasetTest, CachesItsIndices) {
  const std::string dir = testutil::MakeTempDir("worker_data");
  ASSERT_FALSE(dir.empty());
  std::vector<std::shared_ptr<const SampleDataset>> parts = {
      std::make_shared<FixedDataset>(0, 700), std::make_shared<FixedDataset>(1, 700)};
  BlendedDatasetOptions o;
  o.cache_dir = dir;
  MT_ASSERT_OK_AND_ASSIGN(auto a, BlendedDataset::Create(parts, {1, 2}, 900, o));
  EXPECT_EQ(a->cache_outcome(), CacheOutcome::kBuiltAndSaved);
  MT_ASSERT_OK_AND_ASSIGN(auto b, BlendedDataset::Create(parts, {1, 2}, 900, o));
  EXPECT_EQ(b->cache_outcome(), CacheOutcome::kLoaded);
  EXPECT_THAT(b->dataset_index(), ElementsAreArray(a->dataset_index()));
  EXPECT_THAT(b->dataset_sample_index(), ElementsAreArray(a->dataset_sample_index()));
  MT_ASSERT_OK_AND_ASSIGN(auto c, BlendedDataset::Create(parts, {1, 3}, 900, o));
  EXPECT_EQ(c->cache_outcome(), CacheOutcome::kBuiltAndSaved);
}

// ----- the builder -----

class BuildGPTDatasetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::MakeTempDir("worker_data");
    ASSERT_FALSE(dir_.empty());
    a_ = dir_ + "/a";
    b_ = dir_ + "/b";
    WriteDataset(a_, Lengths(100, 2));
    WriteDataset(b_, Lengths(60, 3));
  }
  GPTDataConfig Config() const {
    GPTDataConfig c;
    c.seq_length = 16;
    c.seed = 7;
    c.cache_dir = dir_ + "/cache";
    return c;
  }
  // The documents a dataset's samples come from (tokens are doc * 10000 + pos).
  static std::set<int32_t> Documents(const SampleDataset& ds) {
    std::set<int32_t> out;
    for (int64_t i = 0; i < ds.size(); ++i) {
      const std::vector<int32_t> sample = ds.Sample(i).value();
      for (int32_t t : sample) out.insert(t / 10000);
    }
    return out;
  }
  std::string dir_, a_, b_;
};

TEST_F(BuildGPTDatasetsTest, OnePrefixIsSplitByDocuments) {
  GPTDataConfig c = Config();
  c.blend.prefixes = {a_};
  c.split = "8,1,1";
  MT_ASSERT_OK_AND_ASSIGN(GPTDatasets ds, BuildGPTDatasets(c, {100, 20, 10}));
  ASSERT_NE(ds.train, nullptr);
  ASSERT_NE(ds.valid, nullptr);
  ASSERT_NE(ds.test, nullptr);
  EXPECT_GE(ds.train->size(), 100);
  EXPECT_GE(ds.valid->size(), 20);
  EXPECT_GE(ds.test->size(), 10);
  const auto* train = dynamic_cast<const GPTDataset*>(ds.train.get());
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->options().documents, (DocumentRange{0, 80}));
  for (int32_t d : Documents(*ds.train)) EXPECT_LT(d, 80);
  for (int32_t d : Documents(*ds.valid)) EXPECT_TRUE(d >= 80 && d < 90) << d;
  for (int32_t d : Documents(*ds.test)) EXPECT_TRUE(d >= 90 && d < 100) << d;
  EXPECT_EQ(ds[Split::kValid], ds.valid);

  // Asking for no validation samples builds no validation dataset; an absent split is null.
  c.split = "1,0,1";
  MT_ASSERT_OK_AND_ASSIGN(ds, BuildGPTDatasets(c, {100, 20, 0}));
  EXPECT_NE(ds.train, nullptr);
  EXPECT_EQ(ds.valid, nullptr);
  EXPECT_EQ(ds.test, nullptr);
}

TEST_F(BuildGPTDatasetsTest, WeightedPrefixesAreBlendedToTheExactSize) {
  GPTDataConfig c = Config();
  c.blend.prefixes = {a_, b_};
  c.blend.weights = {30, 70};
  c.split = "98,2,0";
  MT_ASSERT_OK_AND_ASSIGN(GPTDatasets ds, BuildGPTDatasets(c, {400, 12, 5}));
  const auto* blend = dynamic_cast<const BlendedDataset*>(ds.train.get());
  ASSERT_NE(blend, nullptr);
  EXPECT_EQ(blend->size(), 400);
  ASSERT_EQ(blend->datasets().size(), 2u);
  // Each part was asked for ceil(400 * w * 1.005) samples.
  const auto* part0 = dynamic_cast<const GPTDataset*>(blend->datasets()[0].get());
  const auto* part1 = dynamic_cast<const GPTDataset*>(blend->datasets()[1].get());
  ASSERT_TRUE(part0 != nullptr && part1 != nullptr);
  EXPECT_EQ(part0->options().num_samples, 121);
  EXPECT_EQ(part1->options().num_samples, 282);
  int64_t from_b = 0;
  for (int16_t d : blend->dataset_index()) from_b += d;
  EXPECT_EQ(from_b, 280);
  EXPECT_EQ(blend->cache_outcome(), CacheOutcome::kBuiltAndSaved);
  EXPECT_EQ(ds.test, nullptr);  // weight 0
  // Built again: everything comes from the cache, sample for sample the same.
  MT_ASSERT_OK_AND_ASSIGN(GPTDatasets again, BuildGPTDatasets(c, {400, 12, 5}));
  const auto* blend2 = dynamic_cast<const BlendedDataset*>(again.train.get());
  EXPECT_EQ(blend2->cache_outcome(), CacheOutcome::kLoaded);
  for (int64_t i = 0; i < 400; i += 13) {
    EXPECT_EQ(ds.train->Sample(i).value(), again.train->Sample(i).value());
  }
}

TEST_F(BuildGPTDatasetsTest, UnweightedPrefixesBlendOneEpochEach) {
  GPTDataConfig c = Config();
  c.blend.prefixes = {a_, b_};
  c.split = "1";
  MT_ASSERT_OK_AND_ASSIGN(GPTDatasets ds, BuildGPTDatasets(c, {1000000, 0, 0}));
  const auto* blend = dynamic_cast<const BlendedDataset*>(ds.train.get());
  ASSERT_NE(blend, nullptr);
  const int64_t total = blend->datasets()[0]->size() + blend->datasets()[1]->size();
  EXPECT_EQ(blend->size(), total);  // min(requested, one epoch of each)
}

TEST_F(BuildGPTDatasetsTest, PerSplitPaths) {
  GPTDataConfig c = Config();
  c.blend_per_split[0] = Blend{{a_}, {}};
  c.blend_per_split[1] = Blend{{a_, b_}, {1, 1}};
  MT_ASSERT_OK_AND_ASSIGN(GPTDatasets ds, BuildGPTDatasets(c, {50, 20, 10}));
  const auto* train = dynamic_cast<const GPTDataset*>(ds.train.get());
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->options().documents, (DocumentRange{0, 100}));
  EXPECT_NE(dynamic_cast<const BlendedDataset*>(ds.valid.get()), nullptr);
  EXPECT_EQ(ds.valid->size(), 20);
  EXPECT_EQ(ds.test, nullptr);
}

TEST_F(BuildGPTDatasetsTest, RejectsBadConfigs) {
  GPTDataConfig c = Config();
  EXPECT_THAT(BuildGPTDatasets(c, {1, 1, 1}), StatusIs(absl::StatusCode::kInvalidArgument));
  c.blend.prefixes = {a_};
  c.blend_per_split[0] = Blend{{a_}, {}};
  EXPECT_THAT(BuildGPTDatasets(c, {1, 1, 1}), StatusIs(absl::StatusCode::kInvalidArgument));
  c = Config();
  c.blend.prefixes = {a_};
  c.split = "0,0";
  EXPECT_THAT(BuildGPTDatasets(c, {1, 1, 1}), StatusIs(absl::StatusCode::kInvalidArgument));
  c.split = "1000,1,0";  // 100 documents: the validation split gets none
  EXPECT_THAT(BuildGPTDatasets(c, {1, 1, 0}), StatusIs(absl::StatusCode::kFailedPrecondition));
  c.split = "1";
  c.blend.prefixes = {dir_ + "/missing"};
  EXPECT_THAT(BuildGPTDatasets(c, {1, 0, 0}), StatusIs(absl::StatusCode::kNotFound));
  c.blend.prefixes = {a_, b_};
  c.blend.weights = {1};
  EXPECT_THAT(BuildGPTDatasets(c, {1, 0, 0}), StatusIs(absl::StatusCode::kInvalidArgument));
  c.blend.weights = {1, -1};
  EXPECT_THAT(BuildGPTDatasets(c, {1, 0, 0}), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace mt::data
