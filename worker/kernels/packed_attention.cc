#include "worker/kernels/packed_attention.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "worker/kernels/qkv_heads.h"

// The cuDNN SDPA backward's entry point and the SDPA backend's number: internal LibTorch
// headers, present in CUDA LibTorch 2.5 and later.
#if MT_KERNELS_WITH_CUDA && defined(__has_include) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))
#if __has_include(<ATen/native/cudnn/MHA.h>) && \
    __has_include(<ATen/native/transformers/sdp_utils_cpp.h>)
#include <ATen/native/cudnn/MHA.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#define MT_PACKED_ATTENTION 1
#endif
#endif
#ifndef MT_PACKED_ATTENTION
#define MT_PACKED_ATTENTION 0
#endif

namespace mt::kernels {
namespace {

#if MT_PACKED_ATTENTION
// The softmax statistics [b, heads, s, 1] with their last (size 1) dimension's stride
// kStatsMark: the same memory, read the same way, but a layout LibTorch never makes. LibTorch's
// cache of cuDNN backward graphs tells graphs apart by the statistics' layout, not by dQ's
// (packed_attention.h): so this backward's graphs, built with dQ, dK, dV as views of one
// tensor, are not those of LibTorch's own backward on the same q, k, v.
constexpr int64_t kStatsMark = 3;

torch::Tensor MarkedStats(const torch::Tensor& stats) {
  TORCH_CHECK(stats.dim() == 4 && stats.size(3) == 1,
              "PackedCausalAttention: softmax statistics [b, heads, s, 1] expected from "
              "LibTorch's cuDNN attention, got ",
              stats.sizes());
  return stats.as_strided(stats.sizes(),
                          {stats.stride(0), stats.stride(1), stats.stride(2), kStatsMark});
}

// Inputs: q, k, v [b, heads, s, d] (PackedQkvViews), dropout_p. Saves them, the output, the
// softmax statistics and the dropout's seed and offset, as LibTorch's node does.
class PackedAttentionFunction : public torch::autograd::Function<PackedAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v, double dropout_p) {
    auto result = at::_scaled_dot_product_cudnn_attention(
        q, k, v, /*attn_bias=*/std::nullopt, /*compute_log_sumexp=*/true, dropout_p,
        /*is_causal=*/true, /*return_debug_mask=*/false, /*scale=*/std::nullopt);
    const torch::Tensor out = std::get<0>(result);
    ctx->save_for_backward(
        {q, k, v, out, std::get<1>(result), std::get<6>(result), std::get<7>(result)});
    ctx->saved_data["dropout_p"] = dropout_p;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3];
    const torch::Tensor &stats = saved[4], &seed = saved[5], &offset = saved[6];
    const int64_t b = q.size(0), heads = q.size(1), s = q.size(2), d = q.size(3);
    torch::Tensor dout = grads[0].defined() ? grads[0] : torch::zeros_like(out);
    if (dout.stride(3) != 1) dout = dout.contiguous();
    // The projection's gradient [b, s, heads, 3d]; dq, dk, dv are its views as q, k, v are.
    const torch::Tensor dqkv = torch::empty({b, s, heads, 3 * d}, q.options());
    std::vector<torch::Tensor> parts = dqkv.split(d, -1);
    for (torch::Tensor& p : parts) p = p.transpose(1, 2);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    at::native::run_cudnn_SDP_bprop(b, heads, s, s, d, d, scale, /*is_causal=*/true,
                                    static_cast<float>(ctx->saved_data["dropout_p"].toDouble()), q,
                                    k, v, /*attn_bias=*/std::nullopt, out, dout, MarkedStats(stats),
                                    parts[0], parts[1], parts[2], seed, offset);
    return {parts[0], parts[1], parts[2], torch::Tensor()};
  }
};
#endif

}  // namespace

bool PackedCausalAttentionBuilt() { return MT_PACKED_ATTENTION != 0; }

bool PackedCausalAttentionTakes(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, double dropout_p) {
#if MT_PACKED_ATTENTION
  if (!torch::GradMode::is_enabled() || !PackedQkvViews(q, k, v) || !q.is_cuda() ||
      !q.requires_grad() || !k.requires_grad() || !v.requires_grad()) {
    return false;
  }
  const int64_t choice = at::_fused_sdp_choice(q, k, v, /*attn_mask=*/std::nullopt, dropout_p,
                                               /*is_causal=*/true);
  return choice == static_cast<int64_t>(sdp::SDPBackend::cudnn_attention);
#else
  (void)q, (void)k, (void)v, (void)dropout_p;
  return false;
#endif
}

torch::Tensor PackedCausalAttention(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, double dropout_p) {
  TORCH_CHECK(PackedCausalAttentionTakes(q, k, v, dropout_p),
              "PackedCausalAttention: q, k, v must be CUDA views of one [b, s, heads, 3d] "
              "projection that need gradients, and LibTorch's SDPA must choose cuDNN for them "
              "(see PackedCausalAttentionTakes); got q ",
              q.sizes(), " strides ", q.strides());
#if MT_PACKED_ATTENTION
  return PackedAttentionFunction::apply(q, k, v, dropout_p);
#else
  return torch::Tensor();  // unreachable: Takes is false without the build
#endif
}

}  // namespace mt::kernels
