#include "common/base/rng.h"

#include <string>

#include "gtest/gtest.h"

namespace mt {
namespace {

// Reference values: the first outputs of the SplitMix64 generator seeded with 0 (each output
// is SplitMix64 of the state after k increments of the golden gamma), and FNV-1a's published
// test vectors.
TEST(Rng, SplitMix64MatchesTheReferenceSequence) {
  static_assert(SplitMix64(0) == 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(SplitMix64(2 * 0x9E3779B97F4A7C15ull), 0x06C45D188009454Full);
}

TEST(Rng, Fnv1aMatchesTheReferenceVectors) {
  EXPECT_EQ(Fnv1a("", 0), 0xCBF29CE484222325ull);
  EXPECT_EQ(Fnv1a("a", 1), 0xAF63DC4C8601EC8Cull);
  EXPECT_EQ(Fnv1a("foobar", 6), 0x85944171F73967E8ull);
  // Continuing from a prefix's hash equals hashing the whole.
  EXPECT_EQ(Fnv1a("bar", 3, Fnv1a("foo", 3)), Fnv1a("foobar", 6));
}

}  // namespace
}  // namespace mt
