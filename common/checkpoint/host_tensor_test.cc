#include "common/checkpoint/host_tensor.h"

#include <cmath>
#include <cstring>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::checkpoint {
namespace {

using ::mt::testing::StatusIs;

HostTensor Iota(std::vector<int64_t> shape) {
  HostTensor t = ZerosTensor(DType::kF32, std::move(shape));
  float* p = reinterpret_cast<float*>(t.data.data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i);
  return t;
}

float At(const HostTensor& t, int64_t i) {
  float f;
  std::memcpy(&f, t.data.data() + 4 * i, 4);
  return f;
}

TEST(HostTensorTest, SliceAndConcatAreInverseAlongEitherDim) {
  const HostTensor t = Iota({4, 6});
  for (int dim : {0, 1}) {
    std::vector<HostTensor> parts;
    const int64_t n = t.shape[dim] / 2;
    for (int r = 0; r < 2; ++r) {
      MT_ASSERT_OK_AND_ASSIGN(HostTensor p, SliceAlong(t, dim, r * n, n));
      parts.push_back(p);
    }
    // Row-parallel (dim 1) slice 1 of [4, 6] starts with element (0, 3).
    if (dim == 1) {
      EXPECT_EQ(parts[1].shape, (std::vector<int64_t>{4, 3}));
      EXPECT_EQ(At(parts[1], 0), 3.0f);
      EXPECT_EQ(At(parts[1], 3), 9.0f);
    }
    MT_ASSERT_OK_AND_ASSIGN(HostTensor back, ConcatAlong(parts, dim));
    EXPECT_EQ(back.shape, t.shape);
    EXPECT_EQ(back.data, t.data);
  }
  EXPECT_THAT(SliceAlong(t, 2, 0, 1), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SliceAlong(t, 0, 3, 2), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(HostTensorTest, TransposePermuteResize) {
  const HostTensor t = Iota({3, 5});
  MT_ASSERT_OK_AND_ASSIGN(HostTensor tt, Transpose2D(t));
  ASSERT_EQ(tt.shape, (std::vector<int64_t>{5, 3}));
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 5; ++c) EXPECT_EQ(At(tt, c * 3 + r), At(t, r * 5 + c));
  }
  MT_ASSERT_OK_AND_ASSIGN(HostTensor p, PermuteRows(t, {2, 0, 1}));
  EXPECT_EQ(At(p, 0), 10.0f);
  EXPECT_EQ(At(p, 5), 0.0f);
  MT_ASSERT_OK_AND_ASSIGN(HostTensor grown, ResizeRows(t, 5));
  EXPECT_EQ(grown.shape[0], 5);
  EXPECT_EQ(At(grown, 14), 14.0f);
  EXPECT_EQ(At(grown, 24), 0.0f);
  MT_ASSERT_OK_AND_ASSIGN(HostTensor cut, ResizeRows(grown, 2));
  EXPECT_EQ(cut.data, t.data.substr(0, 40));
}

// Every finite half and bfloat16 value survives float and back exactly.
TEST(HostTensorTest, SixteenBitConversionsRoundTripExhaustively) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << h;
    const float b = BFloat16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(b)) continue;
    ASSERT_EQ(FloatToBFloat16(b), h) << h;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);                         // rounds to infinity
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);            // smallest subnormal
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie to even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
}

TEST(HostTensorTest, CastBetweenFloatTypes) {
  HostTensor t = Iota({2, 2});
  MT_ASSERT_OK_AND_ASSIGN(HostTensor h, CastTo(t, DType::kBF16));
  EXPECT_EQ(h.nbytes(), 8u);
  MT_ASSERT_OK_AND_ASSIGN(HostTensor back, CastTo(h, DType::kF32));
  EXPECT_EQ(back.data, t.data);  // small integers are exact in bfloat16
  HostTensor i = ZerosTensor(DType::kI64, {2});
  EXPECT_THAT(CastTo(i, DType::kF32), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace mt::checkpoint
