#include "worker/engine/batch_source.h"

#include <vector>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::engine {
namespace {

using ::mt::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

TEST(TokenSequenceSourceTest, WindowsOverlapByOneAndWrap) {
  MT_ASSERT_OK_AND_ASSIGN(auto source,
                          TokenSequenceSource::Create({0, 1, 2, 3, 4, 5, 6}, /*seq_length=*/3));
  MT_ASSERT_OK_AND_ASSIGN(TokenBatch a, source->Next(2));
  EXPECT_EQ(a.rows, 2);
  EXPECT_EQ(a.cols, 4);
  EXPECT_THAT(a.tokens, ElementsAre(0, 1, 2, 3, /**/ 3, 4, 5, 6));
  MT_ASSERT_OK_AND_ASSIGN(TokenBatch b, source->Next(1));
  EXPECT_THAT(b.tokens, ElementsAre(6, 0, 1, 2));  // sample 2 starts at 6 and wraps
  EXPECT_EQ(source->next_sample(), 3);
}

TEST(TokenSequenceSourceTest, ExactGlobalBatchRepeats) {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 4 * 5; ++i) tokens.push_back(i);  // 4 samples of 5 tokens
  MT_ASSERT_OK_AND_ASSIGN(auto source, TokenSequenceSource::Create(tokens, 5));
  MT_ASSERT_OK_AND_ASSIGN(TokenBatch first, source->Next(4));
  MT_ASSERT_OK_AND_ASSIGN(TokenBatch second, source->Next(4));
  EXPECT_EQ(first.tokens, second.tokens);
  // Micro-batches see the same samples as one big batch.
  MT_ASSERT_OK_AND_ASSIGN(auto split, TokenSequenceSource::Create(tokens, 5));
  std::vector<int64_t> joined;
  for (int i = 0; i < 2; ++i) {
    MT_ASSERT_OK_AND_ASSIGN(TokenBatch half, split->Next(2));
    joined.insert(joined.end(), half.tokens.begin(), half.tokens.end());
  }
  EXPECT_EQ(joined, first.tokens);
}

TEST(TokenSequenceSourceTest, FirstSampleOffsets) {
  MT_ASSERT_OK_AND_ASSIGN(auto source, TokenSequenceSource::Create({0, 1, 2, 3, 4, 5}, 2, 1));
  MT_ASSERT_OK_AND_ASSIGN(TokenBatch a, source->Next(1));
  EXPECT_THAT(a.tokens, ElementsAre(2, 3, 4));
}

TEST(TokenSequenceSourceTest, RejectsBadInput) {
  EXPECT_THAT(TokenSequenceSource::Create({}, 3),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("empty")));
  EXPECT_THAT(TokenSequenceSource::Create({1}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("seq_length")));
  EXPECT_THAT(TokenSequenceSource::Create({1, -2}, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("negative")));
  MT_ASSERT_OK_AND_ASSIGN(auto source, TokenSequenceSource::Create({1, 2}, 1));
  EXPECT_THAT(source->Next(0), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(SyntheticTokensTest, DeterministicAndInRange) {
  const std::vector<int64_t> a = SyntheticTokens(1000, 50257, 1234);
  EXPECT_EQ(a, SyntheticTokens(1000, 50257, 1234));
  EXPECT_NE(a, SyntheticTokens(1000, 50257, 1235));
  for (int64_t t : a) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 50257);
  }
  // splitmix64 golden values (seed 0): 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4 mod 1000.
  EXPECT_THAT(SyntheticTokens(2, 1000, 0),
              ElementsAreArray({static_cast<int64_t>(0xE220A8397B1DCDAFull % 1000),
                                static_cast<int64_t>(0x6E789E6AA1B965F4ull % 1000)}));
  EXPECT_TRUE(SyntheticTokens(0, 10, 1).empty());
}

}  // namespace
}  // namespace mt::engine
