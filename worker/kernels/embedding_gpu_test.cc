// Embedding and EmbeddingBackward (embedding.h) on the GPU (label `gpu`; skips without CUDA),
// and their CPU fallback.
//
// EmbeddingBackward against the fp64 sums of the same (rounded) gradient rows (index_add_ on
// the CPU) for token streams that exercise each way a token's run lies in the sorted order:
// all tokens distinct; a small vocabulary (runs inside a chunk of 16 and across chunks); one
// token half of all lookups (a run over 1,000 chunks, summed through the partials); a count that
// is not a multiple of 16; a GPT-2 124M step's shape (32,768 lookups, 50,304 x 768). Bound:
// |got - want| <= u |want| + 1e-5 sum |rows| (u: the output's rounding, 2^-8 bf16, 2^-11 fp16, 0
// fp32; 1e-5 covers fp32 sums in another order); rows no token names are exactly zero; run
// twice the same bits. LibTorch's own backward meets the same bound where it sums in fp32 and
// rounds once (its sort-based path, above 3,072 lookups; at or below, its feature kernel adds
// each warp's fp32 partial into the 16-bit output, rounding again each time: 1,001 bf16 lookups
// missed the bound by up to 0.05 on an H100). Embedding: the forward is
// torch::embedding's, bit for bit, and autograd's weight gradient is EmbeddingBackward's. A
// captured call replays to the eager call's bits. Rows of 7 bf16 columns (no whole 16-byte
// vectors) take LibTorch's backward. Tokens outside [0, rows) (-1, rows, 2^33, the int64 extremes,
// a quarter of all) add to no row, and the kernel writes nothing in the guard rows around the
// table.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "worker/kernels/embedding.h"
#include "worker/kernels/tensor_error_for_test.h"

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include <cstdint>
#include <limits>

#include "worker/kernels/embedding_launch.h"
#include "worker/kernels/graph_capture_for_test.h"
#endif

namespace mt::kernels::embedding_gpu_test {
namespace {

// max over the table of |got - want| - bound (<= 0 passes), want the fp64 sums on the CPU.
double Excess(const torch::Tensor& got, const torch::Tensor& grad, const torch::Tensor& tokens,
              int64_t rows) {
  const int64_t cols = grad.size(-1);
  const torch::Tensor g = grad.reshape({-1, cols}).to(torch::kCPU).to(torch::kDouble);
  const torch::Tensor t = tokens.reshape({-1}).to(torch::kCPU);
  const torch::Tensor want = torch::zeros({rows, cols}, g.options()).index_add_(0, t, g);
  const torch::Tensor mass = torch::zeros({rows, cols}, g.options()).index_add_(0, t, g.abs());
  const torch::Tensor bound = RoundingUnit(grad.scalar_type()) * want.abs() + 1e-5 * mass;
  return ((got.to(torch::kCPU).to(torch::kDouble) - want).abs() - bound).max().item<double>();
}

// Rows of the table that no token names.
torch::Tensor Unnamed(const torch::Tensor& tokens, int64_t rows) {
  torch::Tensor named = torch::zeros({rows}, torch::kBool);
  named.index_fill_(0, tokens.reshape({-1}).to(torch::kCPU), true);
  return named.logical_not();
}

struct Stream {
  std::string name;
  torch::Tensor tokens;  // int64 on the GPU
  int64_t rows;
};

std::vector<Stream> Streams() {
  const auto on_gpu = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong);
  std::vector<Stream> s;
  s.push_back({"distinct", torch::randperm(4096, on_gpu).reshape({8, 512}), 5000});
  s.push_back({"small vocabulary", torch::randint(0, 40, {4, 1000}, on_gpu), 64});
  torch::Tensor skewed = torch::randint(0, 3000, {32768}, on_gpu);
  skewed.index_put_({torch::randperm(32768, on_gpu).slice(0, 0, 16384)}, 7);
  s.push_back({"one token half of all", skewed.reshape({32, 1024}), 3000});
  s.push_back({"1,001 tokens", torch::randint(0, 300, {1001}, on_gpu), 300});
  s.push_back({"GPT-2 124M step", torch::randint(0, 50257, {32, 1024}, on_gpu), 50304});
  return s;
}

TEST(EmbeddingGpuTest, BackwardMatchesTheFp64SumsAndIsDeterministic) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(5);
  for (const Stream& s : Streams()) {
    for (torch::ScalarType dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
      for (const int64_t cols : {int64_t{8}, int64_t{768}, int64_t{2064}}) {
        if (s.name == "GPT-2 124M step" && cols != 768) continue;
        const std::string what =
            s.name + " " + std::string(c10::toString(dtype)) + " x" + std::to_string(cols);
        std::vector<int64_t> sizes = s.tokens.sizes().vec();
        sizes.push_back(cols);
        const torch::Tensor grad =
            torch::randn(sizes, torch::TensorOptions().device(torch::kCUDA)).to(dtype);
        const torch::Tensor got = EmbeddingBackward(grad, s.tokens, s.rows);
        ASSERT_EQ(got.scalar_type(), dtype) << what;
        ASSERT_EQ(got.sizes(), torch::IntArrayRef({s.rows, cols})) << what;
        EXPECT_LE(Excess(got, grad, s.tokens, s.rows), 0.0) << what;
        const torch::Tensor zero_rows = got.to(torch::kCPU).index({Unnamed(s.tokens, s.rows)});
        EXPECT_EQ(zero_rows.abs().sum().item<double>(), 0.0) << what << ": unnamed rows";
        EXPECT_TRUE(torch::equal(EmbeddingBackward(grad, s.tokens, s.rows), got))
            << what << ": not deterministic";
        if (s.tokens.numel() <= 3072) continue;  // LibTorch rounds more than once (above)
        const torch::Tensor libtorch =
            torch::embedding_backward(grad, s.tokens, s.rows, -1, false, false);
        EXPECT_LE(Excess(libtorch, grad, s.tokens, s.rows), 0.0)
            << what << ": LibTorch's own backward misses the bound";
      }
    }
  }
}

TEST(EmbeddingGpuTest, ForwardIsTheLookupAndAutogradRunsTheKernel) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(6);
  const auto options = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor weight0 = torch::randn({1000, 256}, options).to(torch::kBFloat16);
  const torch::Tensor tokens = torch::randint(0, 1000, {4, 333}, options.dtype(torch::kLong));
  const torch::Tensor dy = torch::randn({4, 333, 256}, options).to(torch::kBFloat16);
  torch::Tensor weight = weight0.clone().requires_grad_(true);
  const torch::Tensor y = Embedding(weight, tokens);
  EXPECT_TRUE(torch::equal(y, torch::embedding(weight0, tokens)));
  y.backward(dy);
  EXPECT_TRUE(torch::equal(weight.grad(), EmbeddingBackward(dy, tokens, 1000)));
}

TEST(EmbeddingGpuTest, RowsOfNoWholeVectorTakeLibTorchsBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto options = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor tokens = torch::randint(0, 50, {200}, options.dtype(torch::kLong));
  const torch::Tensor grad = torch::randn({200, 7}, options).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(EmbeddingBackward(grad, tokens, 50),
                           torch::embedding_backward(grad, tokens, 50, -1, false, false)));
}

#if MT_KERNELS_WITH_CUDA
TEST(EmbeddingGpuTest, ACapturedCallReplaysTheEagerBits) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(7);
  const auto options = torch::TensorOptions().device(torch::kCUDA);
  torch::Tensor tokens = torch::randint(0, 500, {8, 1024}, options.dtype(torch::kLong));
  torch::Tensor grad = torch::randn({8, 1024, 768}, options).to(torch::kBFloat16);
  at::cuda::CUDAGraph graph;
  const torch::Tensor out =
      CaptureForTest([&] { return EmbeddingBackward(grad, tokens, 50304); }, graph);
  for (int replay = 0; replay < 2; ++replay) {
    tokens.copy_(torch::randint(0, 500, tokens.sizes(), tokens.options()));
    grad.copy_(torch::randn(grad.sizes(), options).to(torch::kBFloat16));
    graph.replay();
    torch::cuda::synchronize();
    EXPECT_TRUE(torch::equal(out, EmbeddingBackward(grad, tokens, 50304))) << "replay " << replay;
  }
}

TEST(EmbeddingGpuTest, TokensOutsideTheTableAddToNoRowAndNothingIsWrittenPastIt) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(9);
  constexpr int64_t kRows = 300, kCols = 768, kGuard = 32;
  const auto options = torch::TensorOptions().device(torch::kCUDA);
  // A quarter of the tokens outside [0, kRows): their key is one run over ~60 chunks.
  torch::Tensor tokens = torch::randint(-100, 300, {4, 1000}, options.dtype(torch::kLong));
  const std::vector<int64_t> odd = {-1, kRows, int64_t{1} << 33,
                                    std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max()};
  for (size_t k = 0; k < odd.size(); ++k)
    tokens.view({-1}).index_put_({static_cast<int64_t>(k) * 797}, odd[k]);
  const torch::Tensor valid = tokens.ge(0).logical_and(tokens.lt(kRows)).reshape({-1});
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kFloat}) {
    const std::string what = c10::toString(dtype);
    const torch::Tensor grad = torch::randn({4, 1000, kCols}, options).to(dtype);
    const size_t bytes = EmbeddingBackwardScratchBytes(tokens.numel(), kRows, kCols);
    ASSERT_GT(bytes, 0u) << what;
    torch::Tensor scratch =
        torch::empty({static_cast<int64_t>(bytes)}, options.dtype(torch::kByte));
    torch::Tensor buffer = torch::full({kRows + 2 * kGuard, kCols}, 3.0, options.dtype(dtype));
    const cudaError_t err = LaunchEmbeddingBackward(
        dtype == torch::kFloat ? FloatKind::kFloat32 : FloatKind::kBFloat16, grad.data_ptr(),
        tokens.data_ptr<int64_t>(), tokens.numel(), kRows, kCols,
        buffer.slice(0, kGuard, kGuard + kRows).data_ptr(), scratch.data_ptr(), bytes,
        at::cuda::getCurrentCUDAStream().stream());
    ASSERT_EQ(err, cudaSuccess) << what << ": " << cudaGetErrorString(err);
    const torch::Tensor table = buffer.slice(0, kGuard, kGuard + kRows);
    const torch::Tensor grad2 = grad.reshape({-1, kCols}).index({valid});
    const torch::Tensor named = tokens.reshape({-1}).index({valid});
    EXPECT_LE(Excess(table, grad2, named, kRows), 0.0) << what;
    EXPECT_TRUE(buffer.slice(0, 0, kGuard).eq(3.0).all().item<bool>()) << what << ": before";
    EXPECT_TRUE(buffer.slice(0, kGuard + kRows).eq(3.0).all().item<bool>()) << what << ": after";
    EXPECT_TRUE(torch::equal(EmbeddingBackward(grad, tokens, kRows), table)) << what;
  }
}
#endif

TEST(EmbeddingCpu, FallsBackToLibTorch) {
  torch::manual_seed(8);
  const torch::Tensor tokens = torch::randint(0, 30, {3, 17}, torch::kLong);
  const torch::Tensor grad = torch::randn({3, 17, 16});
  EXPECT_TRUE(torch::equal(EmbeddingBackward(grad, tokens, 30),
                           torch::embedding_backward(grad, tokens, 30, -1, false, false)));
  torch::Tensor weight = torch::randn({30, 16}).requires_grad_(true);
  const torch::Tensor y = Embedding(weight, tokens);
  EXPECT_TRUE(torch::equal(y, torch::embedding(weight.detach(), tokens)));
  y.backward(grad);
  EXPECT_TRUE(torch::equal(weight.grad(), EmbeddingBackward(grad, tokens, 30)));
  EXPECT_THROW(EmbeddingBackward(grad.reshape({51, 16}), tokens, 30), c10::Error);
  EXPECT_THROW(Embedding(weight, tokens.to(torch::kInt)), c10::Error);
}

}  // namespace
}  // namespace mt::kernels::embedding_gpu_test
