#include "worker/kernels/layer_norm.h"

#include <torch/torch.h>

#include <vector>

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "worker/kernels/kind_of.h"
#include "worker/kernels/layer_norm_launch.h"
#include "worker/kernels/philox_state.h"
#endif

namespace mt::kernels {
namespace {

constexpr int64_t kMaxHidden = 16384;  // up to 3 x hidden fp32 of shared memory in backward

#if MT_KERNELS_WITH_CUDA
cudaStream_t StreamOf(const torch::Tensor& t) {
  return at::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

// The forward's dropout for its backward, which draws the same masks again: p and the Philox
// arguments (pointers as integers; they stay valid: LibTorch's graph holds them).
void SaveDropout(torch::autograd::AutogradContext* ctx, const DropoutArgs& drop) {
  ctx->saved_data["dropout_p"] = static_cast<double>(drop.p);
  if (drop.p <= 0.0f) return;
  ctx->saved_data["philox_seed"] = static_cast<int64_t>(drop.rng.seed);
  ctx->saved_data["philox_offset"] = static_cast<int64_t>(drop.rng.offset);
  ctx->saved_data["philox_seed_ptr"] = reinterpret_cast<int64_t>(drop.rng.seed_ptr);
  ctx->saved_data["philox_offset_ptr"] = reinterpret_cast<int64_t>(drop.rng.offset_ptr);
}

DropoutArgs SavedDropout(torch::autograd::AutogradContext* ctx) {
  DropoutArgs drop;
  drop.p = static_cast<float>(ctx->saved_data["dropout_p"].toDouble());
  if (drop.p <= 0.0f) return drop;
  drop.rng.seed = static_cast<uint64_t>(ctx->saved_data["philox_seed"].toInt());
  drop.rng.offset = static_cast<uint64_t>(ctx->saved_data["philox_offset"].toInt());
  drop.rng.seed_ptr = reinterpret_cast<const int64_t*>(ctx->saved_data["philox_seed_ptr"].toInt());
  drop.rng.offset_ptr =
      reinterpret_cast<const int64_t*>(ctx->saved_data["philox_offset_ptr"].toInt());
  return drop;
}

// Inputs: x, residual, residual_bias, weight, bias, eps, add (false: plain LayerNorm; residual
// is then an empty tensor, never read: autograd records every tensor input's device, so an
// undefined tensor cannot be passed), with_residual_bias (false: residual_bias is an empty
// tensor, never read), dropout_p (of residual and residual_bias before they join x; 0: none).
// Outputs: {sum, y} with a residual, {y} without.
class LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                torch::Tensor x, torch::Tensor residual,
                                                torch::Tensor residual_bias, torch::Tensor weight,
                                                torch::Tensor bias, double eps, bool add,
                                                bool with_residual_bias, double dropout_p) {
    const int64_t hidden = x.size(-1);
    const int64_t rows = hidden > 0 ? x.numel() / hidden : 0;
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor rc = add ? residual.contiguous() : torch::Tensor();
    const bool rb = add && with_residual_bias;
    const torch::Tensor rbc = rb ? residual_bias.contiguous() : torch::Tensor();
    const torch::Tensor w = weight.contiguous(), b = bias.contiguous();
    torch::Tensor sum = add ? torch::empty_like(xc) : xc;
    torch::Tensor y = torch::empty_like(xc);
    const auto f32 = xc.options().dtype(torch::kFloat);
    torch::Tensor mean = torch::empty({rows}, f32), rstd = torch::empty({rows}, f32);
    DropoutArgs drop;
    if (add && dropout_p > 0.0) {
      drop.p = static_cast<float>(dropout_p);
      drop.rng = TakePhiloxArgs(xc.device().index(), kDropoutPhiloxIncrement);
    }
    const cudaError_t err = LaunchLayerNormForward(
        KindOf(xc.scalar_type()), xc.data_ptr(), add ? rc.data_ptr() : nullptr,
        add ? sum.data_ptr() : nullptr, w.data_ptr(), b.data_ptr(), y.data_ptr(),
        mean.data_ptr<float>(), rstd.data_ptr<float>(), rows, hidden, static_cast<float>(eps),
        StreamOf(xc), rb ? rbc.data_ptr() : nullptr, drop);
    TORCH_CHECK(err == cudaSuccess, "FusedLayerNorm launch: ", cudaGetErrorString(err));
    ctx->save_for_backward({sum, w, mean, rstd});
    ctx->saved_data["add"] = add;
    ctx->saved_data["residual_bias"] = rb;
    SaveDropout(ctx, drop);
    if (add) return {sum, y};
    return {y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    const bool add = ctx->saved_data["add"].toBool();
    const bool rb = ctx->saved_data["residual_bias"].toBool();
    const DropoutArgs drop = SavedDropout(ctx);
    const torch::Tensor dsum = add && grads[0].defined() ? grads[0].contiguous() : torch::Tensor();
    torch::Tensor dy = grads[add ? 1 : 0];
    dy = dy.defined() ? dy.contiguous() : torch::zeros_like(x);
    const int64_t hidden = x.size(-1);
    const int64_t rows = hidden > 0 ? x.numel() / hidden : 0;
    torch::Tensor dx = torch::empty_like(x);
    torch::Tensor dw = torch::empty_like(w), db = torch::empty_like(w);
    torch::Tensor drb = rb ? torch::empty_like(w) : torch::Tensor();
    // With dropout, the residual's gradient is dropout's backward of the sum's (the same masks).
    torch::Tensor dbranch = drop.p > 0.0f ? torch::empty_like(x) : torch::Tensor();
    torch::Tensor partial =
        torch::empty({LayerNormBackwardSums(rb) * LayerNormBackwardBlocks(rows), hidden},
                     x.options().dtype(torch::kFloat));
    const cudaError_t err = LaunchLayerNormBackward(
        KindOf(x.scalar_type()), dy.data_ptr(), x.data_ptr(), saved[2].data_ptr<float>(),
        saved[3].data_ptr<float>(), w.data_ptr(), dsum.defined() ? dsum.data_ptr() : nullptr,
        dx.data_ptr(), dw.data_ptr(), db.data_ptr(), partial.data_ptr<float>(), rows, hidden,
        StreamOf(x), rb ? drb.data_ptr() : nullptr, drop,
        dbranch.defined() ? dbranch.data_ptr() : nullptr);
    TORCH_CHECK(err == cudaSuccess, "FusedLayerNorm backward launch: ", cudaGetErrorString(err));
    return {dx,
            add ? (dbranch.defined() ? dbranch : dx) : torch::Tensor(),
            drb,
            dw,
            db,
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};
#endif

}  // namespace

bool FusedLayerNormAvailable(const torch::Tensor& x, const torch::Tensor& weight) {
#if MT_KERNELS_WITH_CUDA
  const auto t = x.scalar_type();
  return x.is_cuda() && weight.is_cuda() && weight.scalar_type() == t && KernelFloat(t) &&
         x.dim() >= 1 && x.size(-1) > 0 && x.size(-1) <= kMaxHidden;
#else
  (void)x;
  (void)weight;
  (void)kMaxHidden;
  return false;
#endif
}

torch::Tensor FusedLayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps) {
#if MT_KERNELS_WITH_CUDA
  if (FusedLayerNormAvailable(x, weight) && bias.defined() &&
      bias.scalar_type() == weight.scalar_type()) {
    const torch::Tensor none = torch::empty({0}, x.options());
    return LayerNormFunction::apply(x, none, none, weight, bias, eps, /*add=*/false,
                                    /*with_residual_bias=*/false, /*dropout_p=*/0.0)[0];
  }
#endif
  return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
}

std::pair<torch::Tensor, torch::Tensor> FusedAddLayerNorm(
    const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
    const torch::Tensor& bias, double eps, const torch::Tensor& residual_bias, double dropout_p) {
  TORCH_CHECK(x.sizes() == residual.sizes(), "FusedAddLayerNorm: x ", x.sizes(), " and residual ",
              residual.sizes(), " differ");
  TORCH_CHECK(dropout_p >= 0.0 && dropout_p < 1.0,
              "FusedAddLayerNorm: dropout_p must be in [0, 1), got ", dropout_p);
  const bool rb = residual_bias.defined();
  TORCH_CHECK(!rb || (residual_bias.dim() == 1 && residual_bias.size(0) == x.size(-1)),
              "FusedAddLayerNorm: residual_bias must be [", x.size(-1), "], got ",
              residual_bias.sizes());
#if MT_KERNELS_WITH_CUDA
  if (FusedLayerNormAvailable(x, weight) && bias.defined() &&
      bias.scalar_type() == weight.scalar_type() && residual.scalar_type() == x.scalar_type() &&
      residual.is_cuda() &&
      (!rb || (residual_bias.scalar_type() == x.scalar_type() && residual_bias.is_cuda()))) {
    const torch::Tensor none = torch::empty({0}, x.options());
    auto out = LayerNormFunction::apply(x, residual, rb ? residual_bias : none, weight, bias, eps,
                                        /*add=*/true, rb, dropout_p);
    return {out[0], out[1]};
  }
#endif
  const torch::Tensor branch = rb ? residual + residual_bias : residual;
  torch::Tensor sum = dropout_p > 0.0 ? x + torch::dropout(branch, dropout_p, /*train=*/true)
                                      : (rb ? x + residual + residual_bias : x + residual);
  return {sum, torch::layer_norm(sum, {x.size(-1)}, weight, bias, eps)};
}

}  // namespace mt::kernels
