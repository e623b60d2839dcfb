// Golden values from numpy 1.24 (numpy.random.RandomState), the generator Megatron-LM uses.
#include "worker/data/numpy_random.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::data {
namespace {

using ::testing::ElementsAreArray;

// RandomState(1234)._bit_generator.random_raw(5)
TEST(NumpyRandomStateTest, RawOutputsMatchNumpy) {
  NumpyRandomState rng(1234);
  const std::vector<uint32_t> want = {822569775u, 2137449171u, 2671936806u, 3512589365u,
                                      1880026316u};
  for (uint32_t w : want) EXPECT_EQ(rng.NextUInt32(), w);
}

// a = numpy.arange(20, dtype=int32); RandomState(1234).shuffle(a)
TEST(NumpyRandomStateTest, ShuffleMatchesNumpy) {
  std::vector<int32_t> a(20);
  std::iota(a.begin(), a.end(), 0);
  NumpyRandomState rng(1234);
  rng.Shuffle(a.data(), static_cast<int64_t>(a.size()));
  EXPECT_THAT(
      a, ElementsAreArray({3, 13, 2, 16, 14, 5, 4, 0, 8, 18, 17, 11, 10, 9, 7, 1, 19, 12, 6, 15}));
}

TEST(NumpyRandomStateTest, ShuffleMatchesNumpyForOtherSeedsAndSizes) {
  struct Case {
    uint32_t seed;
    std::vector<int64_t> first20;
  };
  const Case cases[] = {
      {7, {778, 334, 271, 802, 216, 408, 812, 94,  487, 170,
           24,  242, 542, 930, 886, 426, 125, 453, 650, 913}},
      {4294967295u, {94,  405, 819, 632, 217, 169, 449, 275, 165, 828,
                     959, 475, 23,  136, 183, 341, 804, 882, 689, 909}},
  };
  for (const Case& c : cases) {
    std::vector<int64_t> a(1000);
    std::iota(a.begin(), a.end(), 0);
    NumpyRandomState rng(c.seed);
    rng.Shuffle(a.data(), static_cast<int64_t>(a.size()));
    EXPECT_THAT(std::vector<int64_t>(a.begin(), a.begin() + 20), ElementsAreArray(c.first20))
        << "seed " << c.seed;
  }
}

TEST(NumpyRandomStateTest, IntervalStaysInRangeAndTinyShufflesDrawNothing) {
  NumpyRandomState a(5), b(5);
  for (uint64_t max : {0ull, 1ull, 2ull, 7ull, 1000ull, (1ull << 32) + 5}) {
    for (int i = 0; i < 100; ++i) EXPECT_LE(a.Interval(max), max);
  }
  int32_t one = 9;
  b.Shuffle(&one, 1);
  b.Shuffle(&one, 0);
  EXPECT_EQ(one, 9);
  NumpyRandomState fresh(5);
  EXPECT_EQ(b.NextUInt32(), fresh.NextUInt32());  // no draws were made
}

}  // namespace
}  // namespace mt::data
