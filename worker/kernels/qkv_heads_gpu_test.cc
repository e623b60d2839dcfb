// QkvHeads (qkv_heads.h) on the GPU (label `gpu`; skips without CUDA), and its CPU fallback.
//
// Against the chain it replaces, LinearWithBias then view, split and transpose with LibTorch's
// autograd, bit for bit: the forward is the same addmm; the gather copies, its bias sums add in
// ColumnSum's order (the same bits), and dx and dw are then the same GEMMs of the same
// operands. Checked in fp32, bf16 and fp16, for gradients in the [b, heads, s, d] layout and
// in the [b, s, heads, d] one (what an attention kernel may hand back), rows that are not a
// multiple of a chunk (300), columns of a ragged number of 32-vector groups (5 heads of 64 =
// 960), a GPT-2 124M layer's shape (4 x 1,024 rows, 12 heads of 64), one of q, k, v without a
// gradient, and gradients whose strides the kernel does not take (LibTorch's cat instead).
// The CPU test: fp64 against the chain through LibTorch's own linear, 1e-12 relative (its
// bias gradient is another reduction).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "worker/kernels/column_sum.h"
#include "worker/kernels/qkv_heads.h"

#if MT_KERNELS_WITH_CUDA
#include <cuda_runtime_api.h>

#include "worker/kernels/column_sum_launch.h"
#include "worker/kernels/kind_of.h"
#include "worker/kernels/qkv_heads_launch.h"
#endif

namespace mt::kernels::qkv_heads_gpu_test {
namespace {

struct Shape {
  int64_t batch, seq, heads, head_dim, in;
};

struct Result {
  std::vector<torch::Tensor> qkv;
  torch::Tensor dx, dw, db;
};

// The chain QkvHeads replaces (model::SelfAttention's split); `linear` runs x w^T + b.
std::vector<torch::Tensor> Chain(const torch::Tensor& x, const torch::Tensor& w,
                                 const torch::Tensor& b, const Shape& s, bool ours_linear) {
  const torch::Tensor rows = x.reshape({s.batch * s.seq, s.in});
  const torch::Tensor y = ours_linear ? LinearWithBias(rows, w, b) : torch::addmm(b, rows, w.t());
  std::vector<torch::Tensor> parts =
      y.view({s.batch, s.seq, s.heads, 3 * s.head_dim}).split(s.head_dim, -1);
  for (torch::Tensor& t : parts) t = t.transpose(1, 2);
  return parts;
}

// Runs QkvHeads (ours) or the chain forward and backward with the gradients `grads` of q, k, v
// (an undefined one: that output gets none).
Result Project(bool ours, const Shape& s, const torch::Tensor& x0, const torch::Tensor& w0,
               const torch::Tensor& b0, const std::vector<torch::Tensor>& grads) {
  const torch::Tensor x = x0.detach().clone().requires_grad_(true);
  const torch::Tensor w = w0.detach().clone().requires_grad_(true);
  const torch::Tensor b = b0.detach().clone().requires_grad_(true);
  const std::vector<torch::Tensor> qkv =
      ours ? QkvHeads(x, w, b, s.heads, s.head_dim) : Chain(x, w, b, s, x.is_cuda());
  std::vector<torch::Tensor> outputs, seeds;
  for (int p = 0; p < 3; ++p) {
    if (!grads[p].defined()) continue;
    outputs.push_back(qkv[p]);
    seeds.push_back(grads[p]);
  }
  torch::autograd::backward(outputs, seeds);
  std::vector<torch::Tensor> values;
  for (const torch::Tensor& t : qkv) values.push_back(t.detach());
  return {values, x.grad(), w.grad(), b.grad()};
}

// Gradients of q, k, v [b, heads, s, d]: contiguous, or laid out as [b, s, heads, d].
std::vector<torch::Tensor> Grads(const Shape& s, const torch::TensorOptions& options,
                                 bool seq_major) {
  std::vector<torch::Tensor> grads;
  for (int p = 0; p < 3; ++p) {
    grads.push_back(
        seq_major ? torch::randn({s.batch, s.seq, s.heads, s.head_dim}, options).transpose(1, 2)
                  : torch::randn({s.batch, s.heads, s.seq, s.head_dim}, options));
  }
  return grads;
}

torch::Tensor Leaf(const torch::Tensor& t) { return t.detach().requires_grad_(true); }

std::string Name(const Shape& s, torch::ScalarType dtype) {
  return std::string(c10::toString(dtype)) + " b" + std::to_string(s.batch) + " s" +
         std::to_string(s.seq) + " " + std::to_string(s.heads) + "x" + std::to_string(s.head_dim);
}

void ExpectSameBits(const Result& got, const Result& want, const std::string& what) {
  for (int p = 0; p < 3; ++p) {
    EXPECT_TRUE(torch::equal(got.qkv[p], want.qkv[p])) << what << ": output " << p;
    EXPECT_EQ(got.qkv[p].strides(), want.qkv[p].strides()) << what << ": output " << p;
  }
  EXPECT_TRUE(torch::equal(got.db, want.db)) << what << ": db";
  EXPECT_TRUE(torch::equal(got.dx, want.dx)) << what << ": dx";
  EXPECT_TRUE(torch::equal(got.dw, want.dw)) << what << ": dw";
}

TEST(QkvHeadsGpuTest, GivesTheSplitChainsOutputsAndGradientsBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(31);
  const Shape shapes[] = {{2, 300, 4, 64, 128}, {1, 130, 5, 64, 96}, {4, 1024, 12, 64, 768}};
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
    for (const Shape& s : shapes) {
      const torch::Tensor x = torch::randn({s.batch, s.seq, s.in}, options);
      const torch::Tensor w = torch::randn({3 * s.heads * s.head_dim, s.in}, options) * 0.05;
      const torch::Tensor b = torch::randn({3 * s.heads * s.head_dim}, options);
      ASSERT_TRUE(QkvHeadsAvailable(Leaf(x), Leaf(w), Leaf(b), s.heads, s.head_dim));
      for (bool seq_major : {false, true}) {
        const std::vector<torch::Tensor> grads = Grads(s, options, seq_major);
        const std::string what = Name(s, dtype) + (seq_major ? " seq-major" : " head-major");
        ExpectSameBits(Project(true, s, x, w, b, grads), Project(false, s, x, w, b, grads), what);
      }
    }
  }
}

#if MT_KERNELS_WITH_CUDA
// The kernel itself (so that the equalities above cannot all come from the fallback): dqkv is
// the cat of the transposed gradients, db ColumnSum's bits of it; and it refuses what it cannot
// read as 16-byte vectors, queueing nothing.
TEST(QkvHeadsGpuTest, TheGatherKernelWritesTheCatAndColumnSumsBits) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(34);
  const Shape s{3, 333, 5, 64, 0};
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
    const std::vector<torch::Tensor> grads = Grads(s, options, /*seq_major=*/true);
    const int64_t rows = s.batch * s.seq, cols = 3 * s.heads * s.head_dim;
    const torch::Tensor want =
        torch::cat({grads[0].transpose(1, 2), grads[1].transpose(1, 2), grads[2].transpose(1, 2)},
                   -1)
            .reshape({rows, cols});
    torch::Tensor dqkv = torch::full({rows, cols}, 7.0, options);
    torch::Tensor db = torch::full({cols}, 7.0, options);
    torch::Tensor partial =
        torch::empty({ColumnSumChunks(rows), cols}, options.dtype(torch::kFloat));
    HeadsGrad in[3];
    for (int p = 0; p < 3; ++p) {
      in[p] = {grads[p].data_ptr(), grads[p].stride(0), grads[p].stride(1), grads[p].stride(2)};
    }
    const QkvShape shape{s.batch, s.seq, s.heads, s.head_dim};
    ASSERT_EQ(LaunchQkvGradGather(KindOf(dtype), in, shape, dqkv.data_ptr(),
                                  partial.data_ptr<float>(), db.data_ptr(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(torch::equal(dqkv, want)) << c10::toString(dtype);
    EXPECT_TRUE(torch::equal(db, ColumnSum(want))) << c10::toString(dtype);
    // A stride of an odd number of elements: refused, dqkv untouched.
    const torch::Tensor before = dqkv.clone();
    in[1].seq_stride += 1;
    EXPECT_EQ(LaunchQkvGradGather(KindOf(dtype), in, shape, dqkv.data_ptr(),
                                  partial.data_ptr<float>(), db.data_ptr(), nullptr),
              cudaErrorInvalidValue);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(torch::equal(dqkv, before));
  }
}
#endif

TEST(QkvHeadsGpuTest, AnOutputWithoutAGradientAndStridesTheKernelDoesNotTake) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(32);
  const Shape s{2, 200, 4, 64, 128};
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const torch::Tensor x = torch::randn({s.batch, s.seq, s.in}, options);
  const torch::Tensor w = torch::randn({3 * s.heads * s.head_dim, s.in}, options) * 0.05;
  const torch::Tensor b = torch::randn({3 * s.heads * s.head_dim}, options);
  std::vector<torch::Tensor> grads = Grads(s, options, false);
  grads[1] = torch::Tensor();  // k unused
  ExpectSameBits(Project(true, s, x, w, b, grads), Project(false, s, x, w, b, grads), "no dk");
  // The head dimension strided (every other element): LibTorch's cat and ColumnSum.
  grads = Grads(s, options, false);
  grads[2] = torch::randn({s.batch, s.heads, s.seq, 2 * s.head_dim}, options)
                 .slice(3, 0, 2 * s.head_dim, 2);
  ASSERT_NE(grads[2].stride(3), 1);
  ExpectSameBits(Project(true, s, x, w, b, grads), Project(false, s, x, w, b, grads), "strided dv");
}

TEST(QkvHeadsGpuTest, NotAvailableWithoutGradientsOrForOtherShapes) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const torch::Tensor x = torch::randn({2, 8, 32}, options).requires_grad_(true);
  const torch::Tensor w = torch::randn({3 * 2 * 16, 32}, options).requires_grad_(true);
  const torch::Tensor b = torch::randn({3 * 2 * 16}, options).requires_grad_(true);
  EXPECT_TRUE(QkvHeadsAvailable(x, w, b, 2, 16));
  EXPECT_FALSE(QkvHeadsAvailable(x, w, b, 3, 16));  // w has 96 rows, not 3 x 3 x 16
  EXPECT_FALSE(QkvHeadsAvailable(x, w, b.detach(), 2, 16));
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(QkvHeadsAvailable(x, w, b, 2, 16));
  }
  const torch::Tensor w12 = torch::randn({3 * 8 * 4, 32}, options).requires_grad_(true);
  const torch::Tensor b12 = torch::randn({3 * 8 * 4}, options).requires_grad_(true);
  EXPECT_FALSE(QkvHeadsAvailable(x, w12, b12, 8, 4));  // 4 bf16: not a 16-byte vector
}

TEST(QkvHeadsCpu, MatchesTheSplitChainInFp64) {
  torch::manual_seed(33);
  const Shape s{2, 7, 3, 4, 10};
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  const torch::Tensor x = torch::randn({s.batch, s.seq, s.in}, options);
  const torch::Tensor w = torch::randn({3 * s.heads * s.head_dim, s.in}, options);
  const torch::Tensor b = torch::randn({3 * s.heads * s.head_dim}, options);
  EXPECT_FALSE(QkvHeadsAvailable(Leaf(x), Leaf(w), Leaf(b), s.heads, s.head_dim));  // no kernel
  for (bool drop_k : {false, true}) {
    std::vector<torch::Tensor> grads = Grads(s, options, /*seq_major=*/drop_k);
    if (drop_k) grads[1] = torch::Tensor();
    const Result got = Project(true, s, x, w, b, grads);
    const Result want = Project(false, s, x, w, b, grads);
    for (int p = 0; p < 3; ++p) EXPECT_TRUE(torch::equal(got.qkv[p], want.qkv[p])) << p;
    for (const auto& [g, r] :
         {std::pair(got.dx, want.dx), std::pair(got.dw, want.dw), std::pair(got.db, want.db)}) {
      EXPECT_LE(((g - r).abs() - 1e-12 * (1.0 + r.abs())).max().item<double>(), 0.0) << drop_k;
    }
  }
  EXPECT_THROW(QkvHeads(x, w, b, 2, s.head_dim), c10::Error);  // 2 heads: w has 36 rows, not 24
}

}  // namespace
}  // namespace mt::kernels::qkv_heads_gpu_test
