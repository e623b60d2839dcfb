// DecodeAttention (decode_attention.h) on the GPU against an fp64 reference on the same
// (rounded) inputs: the cache written at the position by index, then softmax(q k^T / sqrt(d)) v
// over the entries [0, position]. q, k and v are the split views of a fused QKV output, as in
// the decode step (and once separate contiguous tensors). Shapes: batch 1 / 3 / 16, heads 12 /
// 16 / 32, head_dim 64 / 128 at max_len 256 / 2048, plus head_dim 32, 80, 96 and 256 (every
// lane layout of the kernel) and a max_len of 64 (one split, no combine step); positions 0, 1,
// 127, one in the middle and max_len - 1. The cache entries after the position hold NaN: the
// kernel must not read them. The cache must hold k and v at the position bit for bit and be
// untouched elsewhere. A CUDA graph captured once reads the position from the device on every
// replay. Shapes the kernel does not take (head_dim 16, 36) and the CPU run LibTorch's math.
// Tolerances: fp32 1e-5 absolute + 1e-5 relative (sums in another order); bf16 / fp16 the
// dtype's rounding of an output that is O(1): 1e-2 absolute + 1e-2 relative.
// The lead runs it on the GPU machine:
//   ctest --test-dir BUILD -R mt_kernels_gpu_test --output-on-failure
//   (or BUILD/worker/kernels/mt_kernels_gpu_test --gtest_filter='*DecodeAttention*')
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "worker/kernels/decode_attention.h"

#if MT_KERNELS_WITH_CUDA
#include "worker/kernels/graph_capture_for_test.h"
#endif

namespace mt::kernels::decode_attention_gpu_test {
namespace {

struct Shape {
  int64_t batch, heads, d, max_len;
  bool split_views = true;  // q, k, v as views of one fused QKV output (else contiguous each)
};

// One decode step's attention inputs on `device` in `dtype`.
struct Inputs {
  torch::Tensor q, k, v;  // [b, 1, heads, d]
  torch::Tensor k_cache, v_cache;
};

Inputs MakeInputs(const Shape& s, torch::ScalarType dtype, const torch::Device& device) {
  const auto on = torch::TensorOptions().device(device);
  Inputs in;
  if (s.split_views) {
    // decode_step.cc's layout: per head [q_h, k_h, v_h].
    const torch::Tensor qkv_out = torch::randn({s.batch, 1, s.heads * 3 * s.d}, on).to(dtype);
    std::vector<torch::Tensor> parts = qkv_out.view({s.batch, 1, s.heads, 3 * s.d}).split(s.d, -1);
    in.q = parts[0];
    in.k = parts[1];
    in.v = parts[2];
  } else {
    in.q = torch::randn({s.batch, 1, s.heads, s.d}, on).to(dtype);
    in.k = torch::randn({s.batch, 1, s.heads, s.d}, on).to(dtype);
    in.v = torch::randn({s.batch, 1, s.heads, s.d}, on).to(dtype);
  }
  in.k_cache = torch::randn({s.batch, s.heads, s.max_len, s.d}, on).to(dtype);
  in.v_cache = torch::randn({s.batch, s.heads, s.max_len, s.d}, on).to(dtype);
  return in;
}

// The context [b, 1, heads * d] in fp64 from the caches as they were before the call.
torch::Tensor Reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& k_cache, const torch::Tensor& v_cache, int64_t p) {
  const int64_t b = q.size(0), heads = q.size(2), d = q.size(3);
  torch::Tensor keys = k_cache.to(torch::kDouble).narrow(2, 0, p + 1).clone();
  torch::Tensor values = v_cache.to(torch::kDouble).narrow(2, 0, p + 1).clone();
  keys.select(2, p).copy_(k.select(1, 0));
  values.select(2, p).copy_(v.select(1, 0));
  const torch::Tensor scores =
      torch::matmul(q.to(torch::kDouble).transpose(1, 2), keys.transpose(-2, -1)) /
      std::sqrt(static_cast<double>(d));
  const torch::Tensor context = torch::matmul(torch::softmax(scores, -1), values);
  return context.transpose(1, 2).reshape({b, 1, heads * d});
}

// The worst |got - want| - (atol + rtol |want|); <= 0 passes (NaN fails).
double Excess(const torch::Tensor& got, const torch::Tensor& want, double tol) {
  const torch::Tensor g = got.to(torch::kDouble), w = want.to(torch::kDouble);
  const torch::Tensor excess = (g - w).abs() - (tol + tol * w.abs());
  if (excess.isnan().any().item<bool>()) return std::numeric_limits<double>::infinity();
  return excess.max().item<double>();
}

double Tolerance(torch::ScalarType t) {
  if (t == torch::kFloat) return 1e-5;
  if (t == torch::kDouble) return 1e-10;
  return 1e-2;
}

// The cache after the call: `before` with `token` [b, 1, heads, d] at entry p, bit for bit;
// entries after p compared as NaN where `stale_nan`.
void ExpectCacheWritten(const torch::Tensor& cache, const torch::Tensor& before,
                        const torch::Tensor& token, int64_t p, bool stale_nan,
                        const std::string& what) {
  const int64_t max_len = cache.size(2);
  EXPECT_TRUE(torch::equal(cache.select(2, p), token.select(1, 0))) << what << ": entry " << p;
  EXPECT_TRUE(torch::equal(cache.narrow(2, 0, p), before.narrow(2, 0, p)))
      << what << ": entries before " << p;
  if (p + 1 < max_len) {
    const torch::Tensor after = cache.narrow(2, p + 1, max_len - p - 1);
    if (stale_nan) {
      EXPECT_TRUE(after.isnan().all().item<bool>()) << what << ": entries after " << p;
    } else {
      EXPECT_TRUE(torch::equal(after, before.narrow(2, p + 1, max_len - p - 1)))
          << what << ": entries after " << p;
    }
  }
}

std::string Name(const Shape& s, torch::ScalarType dtype, int64_t p) {
  return std::string(c10::toString(dtype)) + " b" + std::to_string(s.batch) + " h" +
         std::to_string(s.heads) + " d" + std::to_string(s.d) + " max_len " +
         std::to_string(s.max_len) + (s.split_views ? "" : " contiguous") + " position " +
         std::to_string(p);
}

std::vector<int64_t> Positions(int64_t max_len) {
  std::set<int64_t> p = {0, 1, 127, max_len / 2 + 3, max_len - 1};
  std::vector<int64_t> out;
  for (int64_t x : p) {
    if (x < max_len) out.push_back(x);
  }
  return out;
}

class DecodeAttentionGpuTest : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(DecodeAttentionGpuTest, MatchesTheReferenceAndWritesTheCache) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::ScalarType dtype = GetParam();
  const torch::Device cuda(torch::kCUDA);
  const std::vector<Shape> shapes = {
      {1, 12, 64, 256},       {1, 16, 128, 2048}, {1, 32, 64, 2048},  {3, 12, 64, 2048},
      {3, 32, 128, 256},      {16, 12, 128, 256}, {16, 16, 64, 2048}, {16, 32, 128, 2048},
      {2, 4, 32, 300},        {3, 5, 80, 300},    {2, 3, 96, 64},     {2, 8, 256, 512},
      {3, 16, 64, 256, false}};
  torch::manual_seed(17);
  for (const Shape& s : shapes) {
    for (const int64_t p : Positions(s.max_len)) {
      const std::string what = Name(s, dtype, p);
      Inputs in = MakeInputs(s, dtype, cuda);
      if (p + 1 < s.max_len) {
        in.k_cache.narrow(2, p + 1, s.max_len - p - 1).fill_(std::nan(""));
        in.v_cache.narrow(2, p + 1, s.max_len - p - 1).fill_(std::nan(""));
      }
      const torch::Tensor k_before = in.k_cache.clone(), v_before = in.v_cache.clone();
      const torch::Tensor position = torch::full({1}, p, torch::dtype(torch::kLong).device(cuda));
      ASSERT_TRUE(DecodeAttentionAvailable(in.q, in.k, in.v, position, in.k_cache, in.v_cache))
          << what;
      const torch::Tensor got = DecodeAttention(in.q, in.k, in.v, position, in.k_cache, in.v_cache);
      ASSERT_EQ(got.scalar_type(), dtype) << what;
      ASSERT_EQ(got.sizes(), (std::vector<int64_t>{s.batch, 1, s.heads * s.d})) << what;
      ASSERT_TRUE(got.is_contiguous()) << what;
      const torch::Tensor want = Reference(in.q, in.k, in.v, k_before, v_before, p);
      EXPECT_LE(Excess(got, want, Tolerance(dtype)), 0.0) << what;
      ExpectCacheWritten(in.k_cache, k_before, in.k, p, /*stale_nan=*/true, what + " keys");
      ExpectCacheWritten(in.v_cache, v_before, in.v, p, /*stale_nan=*/true, what + " values");
    }
  }
}

// One capture, replays at other positions and with new inputs: the kernel reads the position
// (and everything else) from device memory at replay time.
TEST_P(DecodeAttentionGpuTest, CapturedInACudaGraphFollowsThePositionOnTheDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
#if MT_KERNELS_WITH_CUDA
  const torch::ScalarType dtype = GetParam();
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(18);
  for (const Shape& s : {Shape{2, 12, 64, 512}, Shape{1, 4, 128, 2048}}) {
    Inputs in = MakeInputs(s, dtype, cuda);
    const torch::Tensor position = torch::zeros({1}, torch::dtype(torch::kLong).device(cuda));
    ASSERT_TRUE(DecodeAttentionAvailable(in.q, in.k, in.v, position, in.k_cache, in.v_cache));
    at::cuda::CUDAGraph graph;
    const torch::Tensor out = CaptureForTest(
        [&] { return DecodeAttention(in.q, in.k, in.v, position, in.k_cache, in.v_cache); }, graph);
    for (const int64_t p : {int64_t{5}, s.max_len - 1, int64_t{300}, int64_t{0}, int64_t{127}}) {
      const std::string what = Name(s, dtype, p) + " (graph)";
      position.fill_(p);
      // New token values in place (the graph holds the addresses of q, k and v).
      in.q.copy_(torch::randn(in.q.sizes(), torch::dtype(torch::kFloat).device(cuda)));
      in.k.copy_(torch::randn(in.k.sizes(), torch::dtype(torch::kFloat).device(cuda)));
      in.v.copy_(torch::randn(in.v.sizes(), torch::dtype(torch::kFloat).device(cuda)));
      const torch::Tensor k_before = in.k_cache.clone(), v_before = in.v_cache.clone();
      graph.replay();
      const torch::Tensor want = Reference(in.q, in.k, in.v, k_before, v_before, p);
      EXPECT_LE(Excess(out, want, Tolerance(dtype)), 0.0) << what;
      ExpectCacheWritten(in.k_cache, k_before, in.k, p, /*stale_nan=*/false, what + " keys");
      ExpectCacheWritten(in.v_cache, v_before, in.v, p, /*stale_nan=*/false, what + " values");
    }
  }
#else
  GTEST_SKIP() << "a build without CUDA LibTorch";
#endif
}

// Head dims the kernel does not take run LibTorch's math on the GPU, with the same results.
TEST_P(DecodeAttentionGpuTest, OtherHeadDimsFallBackToTheMath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::ScalarType dtype = GetParam();
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(19);
  for (const Shape& s : {Shape{2, 3, 16, 64}, Shape{2, 3, 36, 100}, Shape{1, 2, 264, 40}}) {
    const int64_t p = s.max_len / 2;
    const std::string what = Name(s, dtype, p);
    Inputs in = MakeInputs(s, dtype, cuda);
    const torch::Tensor k_before = in.k_cache.clone(), v_before = in.v_cache.clone();
    const torch::Tensor position = torch::full({1}, p, torch::dtype(torch::kLong).device(cuda));
    EXPECT_FALSE(DecodeAttentionAvailable(in.q, in.k, in.v, position, in.k_cache, in.v_cache))
        << what;
    const torch::Tensor got = DecodeAttention(in.q, in.k, in.v, position, in.k_cache, in.v_cache);
    EXPECT_LE(Excess(got, Reference(in.q, in.k, in.v, k_before, v_before, p), Tolerance(dtype)),
              0.0)
        << what;
    ExpectCacheWritten(in.k_cache, k_before, in.k, p, /*stale_nan=*/false, what + " keys");
    ExpectCacheWritten(in.v_cache, v_before, in.v, p, /*stale_nan=*/false, what + " values");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DecodeAttentionGpuTest,
                         ::testing::Values(torch::kFloat, torch::kBFloat16, torch::kHalf));

TEST(DecodeAttentionCpu, RunsTheMaskedMath) {
  torch::manual_seed(20);
  for (const torch::ScalarType dtype : {torch::kFloat, torch::kDouble}) {
    for (const Shape& s : {Shape{2, 3, 64, 40}, Shape{1, 4, 32, 16, false}}) {
      for (const int64_t p : {int64_t{0}, int64_t{7}, s.max_len - 1}) {
        const std::string what = Name(s, dtype, p);
        Inputs in = MakeInputs(s, dtype, torch::kCPU);
        const torch::Tensor k_before = in.k_cache.clone(), v_before = in.v_cache.clone();
        const torch::Tensor position = torch::full({1}, p, torch::kLong);
        EXPECT_FALSE(DecodeAttentionAvailable(in.q, in.k, in.v, position, in.k_cache, in.v_cache));
        const torch::Tensor got =
            DecodeAttention(in.q, in.k, in.v, position, in.k_cache, in.v_cache);
        ASSERT_EQ(got.scalar_type(), dtype) << what;
        ASSERT_EQ(got.sizes(), (std::vector<int64_t>{s.batch, 1, s.heads * s.d})) << what;
        EXPECT_LE(Excess(got, Reference(in.q, in.k, in.v, k_before, v_before, p), Tolerance(dtype)),
                  0.0)
            << what;
        ExpectCacheWritten(in.k_cache, k_before, in.k, p, /*stale_nan=*/false, what + " keys");
        ExpectCacheWritten(in.v_cache, v_before, in.v, p, /*stale_nan=*/false, what + " values");
      }
    }
  }
}

TEST(DecodeAttentionCpu, RejectsShapesThatDoNotMatch) {
  const torch::Tensor q = torch::randn({2, 1, 3, 32});
  const torch::Tensor cache = torch::zeros({2, 3, 16, 32});
  const torch::Tensor position = torch::zeros({1}, torch::kLong);
  EXPECT_THROW(DecodeAttention(q, q, q, position, torch::zeros({2, 4, 16, 32}), cache), c10::Error);
  EXPECT_THROW(DecodeAttention(torch::randn({2, 2, 3, 32}), q, q, position, cache, cache),
               c10::Error);
  EXPECT_THROW(DecodeAttention(q, q, q, torch::zeros({2}, torch::kLong), cache, cache), c10::Error);
}

}  // namespace
}  // namespace mt::kernels::decode_attention_gpu_test
