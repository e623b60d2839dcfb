// PackedCausalAttention (packed_attention.h) on the GPU (label `gpu`; skips without CUDA or
// where this build has no packed attention), and its refusals everywhere.
//
// Each case runs causal attention forward and backward three ways on the same q, k, v [b,
// heads, s, d] (views of one [b, s, heads, 3d] tensor, as QkvHeads makes them): ours, LibTorch's
// scaled_dot_product_attention (cuDNN's kernels), and an fp32 reference (softmax with the causal
// mask, LibTorch's autograd). Ours must be as close to the reference as LibTorch's is (x1.25,
// plus 2^-9 of the reference's largest value: cuDNN sums dq with atomics, so the last bits
// move from run to run), and its dq, dk, dv must be views of one tensor laid out as q, k, v are.
//
// LibTorch caches cuDNN backward graphs by the layouts of q, k, v, the output, its gradient and
// the softmax statistics, and builds each graph with its first caller's dq strides
// (packed_attention.h). The order test runs LibTorch's own backward on the same packed views
// before and after ours, in one process, on two shapes (one for each order first): were the two
// sharing a graph, one of them would write dq with the other's strides (wrong values here).
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <string>
#include <vector>

#include "worker/kernels/packed_attention.h"
#include "worker/kernels/qkv_heads.h"

namespace mt::kernels {
namespace {

struct Shape {
  int64_t batch, heads, seq, head_dim;
};

bool Runs() { return torch::cuda::is_available() && PackedCausalAttentionBuilt(); }

// Leaf views q, k, v of one fresh [b, s, heads, 3d] tensor.
std::vector<torch::Tensor> PackedLeaves(const torch::Tensor& qkv, int64_t head_dim) {
  std::vector<torch::Tensor> parts = qkv.split(head_dim, -1);
  for (torch::Tensor& p : parts) p = p.transpose(1, 2).detach().requires_grad_(true);
  return parts;
}

#if TORCH_VERSION_MAJOR >= 2  // scaled_dot_product_attention, and CUDA LibTorch's cuDNN
std::string Name(const Shape& s, torch::ScalarType dtype) {
  return std::string(c10::toString(dtype)) + " b" + std::to_string(s.batch) + " h" +
         std::to_string(s.heads) + " s" + std::to_string(s.seq) + " d" + std::to_string(s.head_dim);
}

struct Pass {
  torch::Tensor out, dq, dk, dv;
};

enum class Way { kOurs, kLibTorch, kReference };

// Causal attention of q, k, v one way, and the gradients for dout.
Pass Attend(Way way, const std::vector<torch::Tensor>& in, const torch::Tensor& dout) {
  std::vector<torch::Tensor> leaves = in;
  if (way == Way::kReference) {
    for (torch::Tensor& t : leaves) t = t.detach().to(torch::kFloat).requires_grad_(true);
  }
  const torch::Tensor &q = leaves[0], &k = leaves[1], &v = leaves[2];
  torch::Tensor out;
  if (way == Way::kOurs) {
    out = PackedCausalAttention(q, k, v, 0.0);
  } else if (way == Way::kLibTorch) {
    out = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  } else {
    const int64_t s = q.size(2);
    const torch::Tensor mask =
        torch::ones({s, s}, q.options().dtype(torch::kBool)).tril().logical_not();
    const torch::Tensor scores =
        torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
    out = torch::matmul(torch::softmax(scores.masked_fill(mask, -INFINITY), -1), v);
  }
  const auto grads = torch::autograd::grad({out}, {q, k, v}, {dout.to(out.scalar_type())});
  return {out.detach(), grads[0], grads[1], grads[2]};
}

double MaxError(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat) - want).abs().max().item<double>();
}

// Ours against the reference no worse than LibTorch's (see the file comment).
void ExpectAsCloseAsLibTorch(const Pass& ours, const Pass& libtorch, const Pass& ref,
                             const std::string& what) {
  const std::pair<const char*, torch::Tensor Pass::*> fields[] = {
      {"out", &Pass::out}, {"dq", &Pass::dq}, {"dk", &Pass::dk}, {"dv", &Pass::dv}};
  for (const auto& [name, field] : fields) {
    const torch::Tensor& want = ref.*field;
    const double scale = want.abs().max().item<double>();
    const double ours_error = MaxError(ours.*field, want);
    const double libtorch_error = MaxError(libtorch.*field, want);
    EXPECT_LE(ours_error, 1.25 * libtorch_error + std::ldexp(scale, -9))
        << what << ": " << name << " (LibTorch's error " << libtorch_error << ", scale " << scale
        << ")";
  }
}

TEST(PackedAttentionGpuTest, AsCloseAsLibTorchsCudnnAndTheGradientsArePacked) {
  if (!Runs()) GTEST_SKIP() << "no CUDA device, or no packed attention in this build";
  torch::manual_seed(61);
  const Shape shapes[] = {{2, 12, 256, 64}, {4, 12, 1024, 64}, {2, 16, 384, 128}, {1, 3, 40, 64}};
  for (const torch::ScalarType dtype : {torch::kBFloat16, torch::kHalf}) {
    for (const Shape& s : shapes) {
      const std::string what = Name(s, dtype);
      const auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
      const torch::Tensor qkv = torch::randn({s.batch, s.seq, s.heads, 3 * s.head_dim}, options);
      const std::vector<torch::Tensor> in = PackedLeaves(qkv, s.head_dim);
      ASSERT_TRUE(PackedCausalAttentionTakes(in[0], in[1], in[2], 0.0)) << what;
      const torch::Tensor dout = torch::randn({s.batch, s.heads, s.seq, s.head_dim}, options);
      std::vector<torch::Tensor> compact;
      for (const torch::Tensor& t : in) {
        compact.push_back(t.detach().contiguous().requires_grad_(true));
      }
      const Pass ours = Attend(Way::kOurs, in, dout);
      const Pass libtorch = Attend(Way::kLibTorch, compact, dout);
      const Pass ref = Attend(Way::kReference, in, dout);
      EXPECT_TRUE(PackedQkvViews(ours.dq, ours.dk, ours.dv)) << what;
      EXPECT_EQ(ours.dq.strides(), in[0].strides()) << what;
      ExpectAsCloseAsLibTorch(ours, libtorch, ref, what);
    }
  }
}

TEST(PackedAttentionGpuTest, LibTorchsOwnBackwardOnTheSameViewsBeforeAndAfterOurs) {
  if (!Runs()) GTEST_SKIP() << "no CUDA device, or no packed attention in this build";
  torch::manual_seed(62);
  const auto options = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  const Shape shapes[] = {{2, 12, 512, 64}, {2, 12, 640, 64}};
  for (int first_ours = 0; first_ours < 2; ++first_ours) {
    const Shape& s = shapes[first_ours];
    const torch::Tensor qkv = torch::randn({s.batch, s.seq, s.heads, 3 * s.head_dim}, options);
    const std::vector<torch::Tensor> in = PackedLeaves(qkv, s.head_dim);
    const torch::Tensor dout = torch::randn({s.batch, s.heads, s.seq, s.head_dim}, options);
    const Pass ref = Attend(Way::kReference, in, dout);
    const std::vector<Way> order =
        first_ours ? std::vector<Way>{Way::kOurs, Way::kLibTorch, Way::kOurs}
                   : std::vector<Way>{Way::kLibTorch, Way::kOurs, Way::kLibTorch};
    std::vector<Pass> runs;
    for (const Way way : order) runs.push_back(Attend(way, in, dout));
    torch::cuda::synchronize();
    const Pass& libtorch = runs[first_ours ? 1 : 0];
    for (size_t i = 0; i < runs.size(); ++i) {
      const std::string what = Name(s, torch::kBFloat16) + " run " + std::to_string(i) +
                               (order[i] == Way::kOurs ? " (ours)" : " (LibTorch's)");
      // LibTorch's own gradients are compact tensors, ours views of one tensor.
      EXPECT_EQ(PackedQkvViews(runs[i].dq, runs[i].dk, runs[i].dv), order[i] == Way::kOurs) << what;
      ExpectAsCloseAsLibTorch(runs[i], libtorch, ref, what);
    }
  }
}

#endif

TEST(PackedAttentionCpu, TakesNoCpuTensorsOrOtherViews) {
  const auto options = torch::TensorOptions().dtype(torch::kFloat);
  const torch::Tensor qkv = torch::randn({2, 16, 3, 3 * 8}, options);
  const std::vector<torch::Tensor> in = PackedLeaves(qkv, 8);
  EXPECT_FALSE(PackedCausalAttentionTakes(in[0], in[1], in[2], 0.0));  // CPU
  EXPECT_THROW(PackedCausalAttention(in[0], in[1], in[2], 0.0), c10::Error);
  if (!Runs()) return;
  const auto cuda = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  const std::vector<torch::Tensor> gpu = PackedLeaves(torch::randn({2, 64, 4, 3 * 64}, cuda), 64);
  EXPECT_TRUE(PackedCausalAttentionTakes(gpu[0], gpu[1], gpu[2], 0.0));
  const torch::Tensor compact_q = gpu[0].detach().contiguous().requires_grad_(true);
  EXPECT_FALSE(PackedCausalAttentionTakes(compact_q, gpu[1], gpu[2], 0.0));  // not one tensor
  {
    torch::NoGradGuard no_grad;  // nothing to write gradients for
    EXPECT_FALSE(PackedCausalAttentionTakes(gpu[0], gpu[1], gpu[2], 0.0));
  }
  const std::vector<torch::Tensor> fp32 =
      PackedLeaves(torch::randn({2, 64, 4, 3 * 64}, cuda.dtype(torch::kFloat)), 64);
  EXPECT_FALSE(PackedCausalAttentionTakes(fp32[0], fp32[1], fp32[2], 0.0));  // no cuDNN for fp32
}

}  // namespace
}  // namespace mt::kernels
