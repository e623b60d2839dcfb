#include "worker/data/gpt_indices.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::data {
namespace {

using ::mt::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// Golden indices from Megatron-LM's own code (gpt_dataset.py _build_document_index /
// _build_shuffle_index, helpers.cpp build_sample_idx transcribed to Python) run with numpy 1.24,
// for documents [0, 30) with lengths 5 + (7 i mod 11), seq_length 16, seed 1234.
// 50 samples: 3 epochs, separate final epoch; 54 samples: 3 epochs, one shuffle; 5 samples: 1.
const std::vector<int32_t> kDocIndex50 = {
    29, 15, 8,  22, 6,  24, 9,  13, 18, 1,  21, 3,  4,  20, 16, 27, 21, 20, 10, 7,  26, 14, 17,
    25, 12, 2,  1,  27, 28, 2,  5,  10, 6,  0,  11, 3,  4,  7,  25, 9,  16, 5,  28, 18, 14, 29,
    13, 0,  26, 11, 23, 19, 15, 24, 22, 12, 23, 8,  19, 17, 1,  23, 10, 0,  29, 16, 28, 11, 21,
    20, 3,  4,  7,  25, 13, 5,  2,  14, 18, 17, 15, 19, 26, 22, 27, 6,  12, 24, 8,  9};
const std::vector<int64_t> kSampleIndex50 = {
    0,  0,  1,  6,  4,  0,  5,  2,  6,  10, 8,  5,  9,  11, 11, 6,  12, 7,  13, 12, 16, 1,  17,
    8,  19, 2,  20, 8,  21, 13, 23, 0,  24, 1,  25, 5,  27, 1,  28, 10, 30, 4,  32, 4,  34, 1,
    35, 12, 37, 2,  38, 8,  39, 9,  41, 5,  43, 0,  44, 6,  45, 7,  48, 0,  50, 0,  51, 4,  53,
    3,  55, 6,  56, 10, 59, 2,  60, 4,  61, 8,  63, 3,  65, 4,  66, 13, 69, 1,  70, 4,  71, 5,
    73, 0,  74, 1,  76, 2,  77, 10, 79, 1,  80, 3,  82, 2,  84, 2,  85, 11, 87, 1,  89, 3};
const std::vector<int64_t> kShuffleIndex50 = {
    15, 6,  11, 30, 8,  33, 10, 34, 28, 13, 16, 5,  12, 3,  35, 27, 19, 9,  32,
    24, 22, 4,  7,  21, 17, 29, 18, 1,  26, 31, 2,  36, 0,  20, 23, 14, 25, 51,
    44, 42, 54, 41, 38, 53, 43, 40, 47, 50, 48, 37, 39, 55, 52, 46, 49, 45};
const std::vector<int32_t> kDocIndex54 = {
    6,  29, 5,  15, 0,  24, 12, 8,  9,  14, 29, 22, 14, 10, 3,  11, 17, 10, 27, 9,  4,  4, 26,
    5,  11, 24, 3,  25, 21, 18, 18, 28, 2,  25, 22, 6,  8,  16, 20, 25, 22, 10, 1,  5,  1, 2,
    13, 21, 26, 28, 16, 27, 12, 7,  15, 14, 17, 18, 21, 6,  1,  12, 19, 2,  3,  0,  11, 7, 27,
    4,  7,  20, 29, 13, 9,  28, 20, 19, 13, 0,  26, 23, 19, 15, 24, 16, 23, 8,  23, 17};
const std::vector<int64_t> kSampleIndex54 = {
    0,  0,  1,  2,  3,  1,  5,  1,  6,  9,  8,  7,  9,  10, 11, 1,  12, 12, 14, 4,  16, 0,  17,
    2,  19, 2,  20, 5,  21, 10, 23, 4,  26, 0,  27, 1,  28, 2,  29, 9,  31, 5,  32, 7,  34, 0,
    35, 11, 38, 0,  39, 3,  40, 4,  42, 6,  44, 3,  45, 7,  47, 7,  49, 3,  50, 5,  52, 7,  54,
    1,  55, 6,  56, 7,  57, 9,  59, 6,  60, 8,  62, 0,  64, 2,  65, 3,  67, 9,  69, 8,  71, 3,
    72, 6,  74, 4,  75, 7,  76, 9,  78, 6,  80, 9,  82, 2,  84, 1,  86, 2,  88, 0,  89, 4};
const std::vector<int64_t> kShuffleIndex54 = {
    37, 28, 6,  13, 5,  23, 10, 40, 54, 29, 48, 43, 46, 38, 25, 18, 11, 16, 2,
    52, 15, 35, 45, 36, 8,  20, 24, 22, 44, 31, 27, 47, 32, 53, 19, 9,  12, 30,
    3,  14, 1,  42, 41, 51, 55, 17, 39, 4,  7,  21, 49, 50, 33, 26, 34, 0};
const std::vector<int32_t> kDocIndex5 = {7,  10, 4, 1,  28, 8,  3, 23, 14, 13, 22, 24, 0, 2,  27,
                                         26, 18, 5, 16, 25, 11, 9, 17, 29, 20, 12, 21, 6, 19, 15};
const std::vector<int64_t> kSampleIndex5 = {0,  0,  1,  6,  3,  2,  4,  6,  6,  2,  7,  3,  8,
                                            7,  10, 0,  12, 3,  14, 6,  16, 4,  18, 3,  19, 12,
                                            21, 8,  22, 11, 24, 3,  25, 6,  27, 1,  28, 3};
const std::vector<int64_t> kShuffleIndex5 = {6,  0,  5,  16, 8, 9,  17, 4,  7,
                                             13, 15, 10, 14, 3, 11, 1,  12, 2};

std::vector<int32_t> GoldenLengths() {
  std::vector<int32_t> lengths(40);
  for (int i = 0; i < 40; ++i) lengths[i] = 5 + (i * 7) % 11;
  return lengths;
}

// ----- split -----

struct SplitCase {
  int64_t n;
  std::string split;
  std::vector<std::optional<std::pair<int64_t, int64_t>>> want;
};

// Expected values: Megatron's parse_and_normalize_split + convert_split_vector_to_split_matrix +
// int(round(b * float(n))) run in Python.
TEST(SplitDocumentsTest, MatchesMegatronTable) {
  using P = std::pair<int64_t, int64_t>;
  const std::optional<P> none;
  const SplitCase cases[] = {
      {40, "969,30,1", {P{0, 39}, P{39, 40}, P{40, 40}}},
      {1000, "969,30,1", {P{0, 969}, P{969, 999}, P{999, 1000}}},
      {10, "1,1,1", {P{0, 3}, P{3, 7}, P{7, 10}}},
      {7, "1,1,1", {P{0, 2}, P{2, 5}, P{5, 7}}},
      {5, "98,2", {P{0, 5}, P{5, 5}, none}},
      {3, "969,30,1", {P{0, 3}, P{3, 3}, P{3, 3}}},
      {100000, "949,50,1", {P{0, 94900}, P{94900, 99900}, P{99900, 100000}}},
      {101, "1/1/1", {P{0, 34}, P{34, 67}, P{67, 101}}},
      {17, "0.3,0.3,0.4", {P{0, 5}, P{5, 10}, P{10, 17}}},
      {2, "1,0,1", {P{0, 1}, none, P{1, 2}}},
      {11, "0,1,0", {none, P{0, 11}, none}},
      {250, "80,10,10", {P{0, 200}, P{200, 225}, P{225, 250}}},
      {6, "1,2,3", {P{0, 1}, P{1, 3}, P{3, 6}}},
  };
  for (const SplitCase& c : cases) {
    MT_ASSERT_OK_AND_ASSIGN(auto weights, ParseSplit(c.split));
    const auto got = SplitDocuments(weights, c.n);
    for (int i = 0; i < kNumSplits; ++i) {
      SCOPED_TRACE(c.split + " n=" + std::to_string(c.n) + " split " + std::to_string(i));
      ASSERT_EQ(got[i].has_value(), c.want[i].has_value());
      if (!got[i].has_value()) continue;
      EXPECT_EQ(got[i]->begin, c.want[i]->first);
      EXPECT_EQ(got[i]->end, c.want[i]->second);
    }
  }
}

TEST(SplitDocumentsTest, RangesTileTheDataset) {
  std::mt19937 gen(3);
  for (int t = 0; t < 500; ++t) {
    const int64_t n = gen() % 5000;
    std::array<double, 3> raw = {double(gen() % 1000), double(gen() % 100), double(gen() % 10)};
    if (raw[0] + raw[1] + raw[2] == 0) raw[0] = 1;
    MT_ASSERT_OK_AND_ASSIGN(auto w, ParseSplit(absl::StrCat(raw[0], ",", raw[1], ",", raw[2])));
    const auto got = SplitDocuments(w, n);
    int64_t at = 0;
    for (int i = 0; i < 3; ++i) {
      if (!got[i].has_value()) {
        EXPECT_EQ(raw[i], 0);
        continue;
      }
      EXPECT_EQ(got[i]->begin, at);
      EXPECT_GE(got[i]->end, got[i]->begin);
      at = got[i]->end;
    }
    EXPECT_EQ(at, n);
  }
}

TEST(ParseSplitTest, AcceptsMegatronForms) {
  MT_ASSERT_OK_AND_ASSIGN(auto a, ParseSplit("969,30,1"));
  EXPECT_DOUBLE_EQ(a[0], 0.969);
  EXPECT_DOUBLE_EQ(a[1], 0.030);
  EXPECT_DOUBLE_EQ(a[2], 0.001);
  MT_ASSERT_OK_AND_ASSIGN(auto b, ParseSplit("99/1"));
  EXPECT_THAT(b, ElementsAre(0.99, 0.01, 0.0));
  MT_ASSERT_OK_AND_ASSIGN(auto c, ParseSplit(" 1 , 1 "));
  EXPECT_THAT(c, ElementsAre(0.5, 0.5, 0.0));
  MT_ASSERT_OK_AND_ASSIGN(auto d, ParseSplit("100"));
  EXPECT_THAT(d, ElementsAre(1.0, 0.0, 0.0));
}

TEST(ParseSplitTest, RejectsBadSplits) {
  for (const char* bad : {"", "0,0,0", "1,2,3,4", "a,b", "-1,2", "1,,x", "inf,1"}) {
    EXPECT_THAT(ParseSplit(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("split")))
        << bad;
  }
}

TEST(NumericsTest, RoundHalfEvenIsPythonRound) {
  EXPECT_EQ(RoundHalfEven(0.5), 0.0);
  EXPECT_EQ(RoundHalfEven(1.5), 2.0);
  EXPECT_EQ(RoundHalfEven(2.5), 2.0);
  EXPECT_EQ(RoundHalfEven(3.5), 4.0);
  EXPECT_EQ(RoundHalfEven(2.4999999), 2.0);
  EXPECT_EQ(RoundHalfEven(2.5000001), 3.0);
  EXPECT_EQ(RoundHalfEven(38.76), 39.0);
}

TEST(NumericsTest, NumpySumIsPairwise) {
  // numpy.sum gives 2.0400000000000005 here; a left-to-right sum gives 2.0399999999999845.
  std::vector<double> w(10, 0.1);
  w.insert(w.end(), 3, 0.3);
  w.insert(w.end(), 140, 1e-3);
  EXPECT_EQ(NumpySum(w), 2.0400000000000005);
  EXPECT_EQ(NumpySum({0.3, 0.7}), 1.0);
  EXPECT_THAT(Normalize({3, 1}), ElementsAre(0.75, 0.25));
}

// ----- sample counts -----

TEST(TrainValidTestNumSamplesTest, MegatronFormula) {
  SampleBudget b;
  b.train_iters = 100;
  b.global_batch_size = 8;
  b.eval_interval = 10;
  b.eval_iters = 5;
  MT_ASSERT_OK_AND_ASSIGN(auto n, TrainValidTestNumSamples(b));
  EXPECT_THAT(n, ElementsAre(800, (100 / 10 + 1) * 5 * 8, 5 * 8));

  b.train_iters = 0;
  b.train_samples = 1000;  // train_iters = 125
  MT_ASSERT_OK_AND_ASSIGN(n, TrainValidTestNumSamples(b));
  EXPECT_THAT(n, ElementsAre(1000, (125 / 10 + 1) * 5 * 8, 40));

  b.eval_interval = 0;  // never evaluate
  MT_ASSERT_OK_AND_ASSIGN(n, TrainValidTestNumSamples(b));
  EXPECT_THAT(n, ElementsAre(1000, 0, 40));
}

TEST(TrainValidTestNumSamplesTest, RejectsBadBudgets) {
  SampleBudget b;
  b.global_batch_size = 8;
  EXPECT_THAT(TrainValidTestNumSamples(b), StatusIs(absl::StatusCode::kInvalidArgument));
  b.train_iters = 1;
  b.train_samples = 1;
  EXPECT_THAT(TrainValidTestNumSamples(b), StatusIs(absl::StatusCode::kInvalidArgument));
  b.train_samples = 0;
  b.global_batch_size = 0;
  EXPECT_THAT(TrainValidTestNumSamples(b), StatusIs(absl::StatusCode::kInvalidArgument));
  b.global_batch_size = 1;
  b.train_iters = int64_t{1} << 62;
  b.eval_interval = 1;
  b.eval_iters = 4;
  EXPECT_THAT(TrainValidTestNumSamples(b), StatusIs(absl::StatusCode::kInvalidArgument));
}

// ----- epochs -----

TEST(PlanEpochsTest, EpochsAndSeparateFinalEpoch) {
  // 300 tokens per epoch, seq 16: (300 - 1) / 16 = 18 samples per epoch, threshold int(14.4).
  MT_ASSERT_OK_AND_ASSIGN(EpochPlan p, PlanEpochs(300, 16, 18));
  EXPECT_EQ(p.num_epochs, 1);  // 18 * 16 + 1 = 289 <= 300
  EXPECT_FALSE(p.separate_final_epoch);
  EXPECT_EQ(p.num_samples_total, 18);

  MT_ASSERT_OK_AND_ASSIGN(p, PlanEpochs(300, 16, 19));  // 305 tokens: 2 epochs
  EXPECT_EQ(p.num_epochs, 2);
  EXPECT_EQ(p.num_samples_sans_final_epoch, 18);
  EXPECT_TRUE(p.separate_final_epoch);  // 1 sample from the last epoch < 14
  EXPECT_EQ(p.num_samples_total, (600 - 1) / 16);

  MT_ASSERT_OK_AND_ASSIGN(p, PlanEpochs(300, 16, 18 + 14));  // 14 from the last: not < 14
  EXPECT_EQ(p.num_epochs, 2);
  EXPECT_FALSE(p.separate_final_epoch);
  MT_ASSERT_OK_AND_ASSIGN(p, PlanEpochs(300, 16, 18 + 13));
  EXPECT_TRUE(p.separate_final_epoch);

  MT_ASSERT_OK_AND_ASSIGN(p, PlanEpochs(300, 16, 0));  // Megatron's "None": one epoch
  EXPECT_EQ(p.num_epochs, 1);

  EXPECT_THAT(PlanEpochs(1, 16, 1), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(PlanEpochs(300, 1, 1), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(PlanEpochs(300, 16, int64_t{1} << 62), StatusIs(absl::StatusCode::kInvalidArgument));
}

// ----- GPT indices against Megatron -----

struct GoldenCase {
  int64_t num_samples;
  int64_t epochs;
  bool separate;
  const std::vector<int32_t>* doc_index;
  const std::vector<int64_t>* sample_index;
  const std::vector<int64_t>* shuffle_index;
};

TEST(GptIndicesTest, MatchMegatronBitForBit) {
  const std::vector<int32_t> lengths = GoldenLengths();
  const GoldenCase cases[] = {
      {50, 3, true, &kDocIndex50, &kSampleIndex50, &kShuffleIndex50},
      {54, 3, false, &kDocIndex54, &kSampleIndex54, &kShuffleIndex54},
      {5, 1, false, &kDocIndex5, &kSampleIndex5, &kShuffleIndex5},
  };
  const DocumentRange range{0, 30};
  int64_t tokens = 0;
  for (int i = 0; i < 30; ++i) tokens += lengths[i];
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.num_samples);
    MT_ASSERT_OK_AND_ASSIGN(EpochPlan plan, PlanEpochs(tokens, 16, c.num_samples));
    EXPECT_EQ(plan.num_epochs, c.epochs);
    EXPECT_EQ(plan.separate_final_epoch, c.separate);
    NumpyRandomState rng(1234);
    MT_ASSERT_OK_AND_ASSIGN(
        auto doc, BuildDocumentIndex(range, plan.num_epochs, plan.separate_final_epoch, &rng));
    EXPECT_THAT(doc, ElementsAreArray(*c.doc_index));
    MT_ASSERT_OK_AND_ASSIGN(auto sample, BuildSampleIndex(lengths, doc, 16, plan));
    EXPECT_THAT(sample, ElementsAreArray(*c.sample_index));
    const auto shuffle = BuildShuffleIndex(
        plan.separate_final_epoch ? plan.num_samples_sans_final_epoch : plan.num_samples_total,
        plan.num_samples_total, &rng);
    EXPECT_THAT(shuffle, ElementsAreArray(*c.shuffle_index));
  }
}

// Global token position of each sample-index entry in the concatenated document stream.
std::vector<int64_t> EntryPositions(const std::vector<int32_t>& lengths,
                                    const std::vector<int32_t>& doc,
                                    const std::vector<int64_t>& sample) {
  std::vector<int64_t> start(doc.size() + 1, 0);
  for (size_t i = 0; i < doc.size(); ++i) start[i + 1] = start[i] + lengths[doc[i]];
  std::vector<int64_t> out;
  for (size_t i = 0; i + 1 < sample.size(); i += 2) {
    EXPECT_GE(sample[i + 1], 0);
    // Every entry but the first, (0, 0), names a real token (the first document may be empty).
    if (i > 0) {
      EXPECT_LT(sample[i + 1], lengths[doc[sample[i]]]) << "an entry names a real token";
    }
    out.push_back(start[sample[i]] + sample[i + 1]);
  }
  return out;
}

TEST(GptIndicesTest, SamplesAreSeqPlusOneTokensOverlappingByOne) {
  std::mt19937 gen(11);
  for (int t = 0; t < 60; ++t) {
    const int64_t n_docs = 1 + gen() % 50;
    std::vector<int32_t> lengths(n_docs + 3);
    for (auto& l : lengths) l = (gen() % 4 == 0) ? 0 : 1 + gen() % 40;  // some empty documents
    lengths[1] = std::max(lengths[1], 2);
    const DocumentRange range{1, 1 + n_docs};
    int64_t tokens = 0;
    for (int64_t d = range.begin; d < range.end; ++d) tokens += lengths[d];
    const int64_t seq = 2 + gen() % 30;
    const int64_t want = gen() % 200;
    SCOPED_TRACE(absl::StrCat("trial ", t, " seq ", seq, " samples ", want, " tokens ", tokens));
    auto plan = PlanEpochs(tokens, seq, want);
    if (tokens <= 1) {
      EXPECT_FALSE(plan.ok());
      continue;
    }
    ASSERT_TRUE(plan.ok()) << plan.status();
    NumpyRandomState rng(gen());
    MT_ASSERT_OK_AND_ASSIGN(
        auto doc, BuildDocumentIndex(range, plan->num_epochs, plan->separate_final_epoch, &rng));
    // Each epoch (or the whole, when shuffled together) holds every document once per epoch.
    std::vector<int64_t> seen(lengths.size(), 0);
    for (int32_t d : doc) ++seen[d];
    for (int64_t d = 0; d < static_cast<int64_t>(lengths.size()); ++d) {
      EXPECT_EQ(seen[d], (d >= range.begin && d < range.end) ? plan->num_epochs : 0);
    }
    MT_ASSERT_OK_AND_ASSIGN(auto sample, BuildSampleIndex(lengths, doc, seq, *plan));
    ASSERT_EQ(sample.size(), static_cast<size_t>(2 * (plan->num_samples_total + 1)));
    EXPECT_GE(plan->num_samples_total, want);
    const std::vector<int64_t> pos = EntryPositions(lengths, doc, sample);
    // Sample i covers positions [pos[i], pos[i+1]] inclusive: seq + 1 tokens, and its last token
    // is sample i+1's first. From position 0, the samples cover [0, samples * seq] with no gap.
    ASSERT_EQ(pos.front(), 0);
    for (size_t i = 0; i + 1 < pos.size(); ++i) ASSERT_EQ(pos[i + 1] - pos[i], seq);
    EXPECT_LE(pos.back() + 1, plan->num_epochs * tokens);
    EXPECT_GT(pos.back() + 1 + seq, plan->num_epochs * tokens) << "no whole sample left out";
  }
}

TEST(GptIndicesTest, ShuffleIndexIsAPermutationPerPart) {
  NumpyRandomState rng(99);
  const auto s = BuildShuffleIndex(30, 45, &rng);
  ASSERT_EQ(s.size(), 45u);
  std::vector<int64_t> first(s.begin(), s.begin() + 30), last(s.begin() + 30, s.end());
  std::sort(first.begin(), first.end());
  std::sort(last.begin(), last.end());
  for (int i = 0; i < 30; ++i) EXPECT_EQ(first[i], i);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(last[i], 30 + i);
}

TEST(GptIndicesTest, DeterministicFromTheSeed) {
  const std::vector<int32_t> lengths = GoldenLengths();
  const auto build = [&](uint32_t seed) {
    NumpyRandomState rng(seed);
    return BuildDocumentIndex({0, 40}, 2, false, &rng).value();
  };
  EXPECT_EQ(build(1), build(1));
  EXPECT_NE(build(1), build(2));
}

// ----- blending -----

// An independent transcription of build_blending_indices: errors of all datasets, then the first
// maximum.
std::vector<int16_t> ReferenceBlend(const std::vector<double>& w, int64_t size) {
  std::vector<int64_t> count(w.size(), 0);
  std::vector<int16_t> out;
  for (int64_t i = 0; i < size; ++i) {
    std::vector<double> err;
    for (size_t d = 0; d < w.size(); ++d) {
      err.push_back(w[d] * std::max<double>(double(i), 1.0) - double(count[d]));
    }
    const auto d = std::max_element(err.begin(), err.end()) - err.begin();
    out.push_back(static_cast<int16_t>(d));
    ++count[d];
  }
  return out;
}

TEST(BlendingTest, ExactCountsAndGreedyOrder) {
  const std::vector<double> w = Normalize(Normalize({0.3, 0.7}));
  const BlendingIndices b = BuildBlendingIndices(w, 1000);
  EXPECT_THAT(b.counts, ElementsAre(300, 700));
  EXPECT_EQ(b.dataset_index, ReferenceBlend(w, 1000));
  // Megatron's helpers.cpp, run by Python on the same weights:
  EXPECT_THAT(std::vector<int16_t>(b.dataset_index.begin(), b.dataset_index.begin() + 30),
              ElementsAreArray({1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0,
                                1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1}));
  std::vector<int64_t> running(2, 0);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(b.dataset_sample_index[i], running[b.dataset_index[i]]++);
  }

  const std::vector<double> w3 = Normalize(Normalize({2, 5, 3}));
  const BlendingIndices b3 = BuildBlendingIndices(w3, 997);
  EXPECT_THAT(b3.counts, ElementsAre(200, 498, 299));
  EXPECT_EQ(b3.dataset_index, ReferenceBlend(w3, 997));
  EXPECT_THAT(std::vector<int16_t>(b3.dataset_index.begin(), b3.dataset_index.begin() + 30),
              ElementsAreArray({1, 2, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2, 1, 2,
                                1, 0, 1, 2, 1, 0, 1, 2, 1, 2, 1, 0, 1, 2, 1}));
}

TEST(BlendingTest, CountsStayWithinOneOfTheirShare) {
  std::mt19937 gen(5);
  for (int t = 0; t < 40; ++t) {
    std::vector<double> raw(1 + gen() % 6);
    for (double& x : raw) x = 1 + gen() % 100;
    const std::vector<double> w = Normalize(raw);
    const int64_t size = gen() % 3000;
    const BlendingIndices b = BuildBlendingIndices(w, size);
    int64_t total = 0;
    for (size_t d = 0; d < w.size(); ++d) {
      EXPECT_LE(std::abs(double(b.counts[d]) - w[d] * double(size)), 1.0 + 1e-9);
      total += b.counts[d];
    }
    EXPECT_EQ(total, size);
    EXPECT_EQ(b.dataset_index, ReferenceBlend(w, size));
  }
}

TEST(BlendingTest, PerDatasetSizesHaveTheHalfPercentMargin) {
  // int(math.ceil(n * w * 1.005)) in Python.
  EXPECT_THAT(BlendedDatasetSizes({0.3, 0.7}, 1000), ElementsAre(302, 704));
  EXPECT_THAT(BlendedDatasetSizes({0.2, 0.5, 0.3}, 997), ElementsAre(201, 501, 301));
  EXPECT_THAT(BlendedDatasetSizes({0.5, 0.5}, 8), ElementsAre(5, 5));
  EXPECT_THAT(BlendedDatasetSizes({0.1, 0.9}, 100000), ElementsAre(10050, 90450));
}

}  // namespace
}  // namespace mt::data
