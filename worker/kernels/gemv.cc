#include "worker/kernels/gemv.h"

#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "worker/kernels/layer_norm.h"

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "worker/kernels/gemv_launch.h"
#include "worker/kernels/kind_of.h"
#endif

namespace mt::kernels {
namespace {

#if MT_KERNELS_WITH_CUDA
// A vector the kernel reads as it is: a CUDA tensor of x's dtype with `numel` contiguous
// elements and nothing for autograd to record.
bool KernelVector(const torch::Tensor& v, const torch::Tensor& x, int64_t numel) {
  return v.is_cuda() && v.scalar_type() == x.scalar_type() && v.is_contiguous() &&
         v.numel() == numel && (!torch::GradMode::is_enabled() || !v.requires_grad());
}

// y [..., out] for the contiguous xc [..., in] of `args` (its other fields set by the caller).
torch::Tensor Launch(const torch::Tensor& xc, const torch::Tensor& weight,
                     const torch::Tensor& bias, bool gelu, GemvArgs args) {
  const int64_t in = xc.size(-1), out = weight.size(0);
  std::vector<int64_t> sizes = xc.sizes().vec();
  sizes.back() = out;
  torch::Tensor y = torch::empty(sizes, xc.options());
  args.x = xc.data_ptr();
  args.w = weight.data_ptr();
  args.bias = bias.defined() ? bias.data_ptr() : nullptr;
  args.gelu = gelu;
  args.y = y.data_ptr();
  args.rows = xc.numel() / in;
  args.out = out;
  args.in = in;
  const cudaError_t err = LaunchGemv(KindOf(xc.scalar_type()), args,
                                     at::cuda::getCurrentCUDAStream(xc.device().index()).stream());
  TORCH_CHECK(err == cudaSuccess, "Gemv launch: ", cudaGetErrorString(err));
  return y;
}
#endif

torch::Tensor Reference(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, bool gelu) {
  torch::Tensor y = torch::nn::functional::linear(x, weight, bias);
  return gelu ? torch::gelu(y, "tanh") : y;
}

}  // namespace

bool GemvAvailable(const torch::Tensor& x, const torch::Tensor& weight) {
#if MT_KERNELS_WITH_CUDA
  const auto t = x.scalar_type();
  if (!x.is_cuda() || !weight.is_cuda() || weight.scalar_type() != t || !KernelFloat(t) ||
      x.dim() < 1 || weight.dim() != 2) {
    return false;
  }
  if (torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad())) {
    return false;
  }
  const int64_t in = x.size(-1);
  const int64_t rows = in > 0 ? x.numel() / in : 0;
  const int64_t vec = 16 / static_cast<int64_t>(x.element_size());
  return rows >= 1 && rows <= GemvMaxRows(KindOf(t)) && in % vec == 0 && weight.size(1) == in &&
         weight.is_contiguous() && Aligned16(weight);
#else
  (void)x;
  (void)weight;
  return false;
#endif
}

torch::Tensor Gemv(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                   bool gelu) {
  TORCH_CHECK(weight.dim() == 2 && x.size(-1) == weight.size(1), "Gemv: x ", x.sizes(),
              " and the weight ", weight.sizes(), " do not match");
#if MT_KERNELS_WITH_CUDA
  if (GemvAvailable(x, weight)) {
    const torch::Tensor xc = x.contiguous();
    if ((!bias.defined() || KernelVector(bias, x, weight.size(0))) && Aligned16(xc)) {
      return Launch(xc, weight, bias, gelu, GemvArgs{});
    }
  }
#endif
  return Reference(x, weight, bias, gelu);
}

bool NormGemvAvailable(const torch::Tensor& x, const torch::Tensor& norm_weight,
                       const torch::Tensor& weight) {
#if MT_KERNELS_WITH_CUDA
  if (!GemvAvailable(x, weight) || !KernelVector(norm_weight, x, x.size(-1)) ||
      !Aligned16(norm_weight)) {
    return false;
  }
  const int64_t in = x.size(-1);
  return GemvNormFits(KindOf(x.scalar_type()), x.numel() / in, in);
#else
  (void)x;
  (void)norm_weight;
  (void)weight;
  return false;
#endif
}

std::pair<torch::Tensor, torch::Tensor> NormGemv(const torch::Tensor& x,
                                                 const torch::Tensor& residual,
                                                 const torch::Tensor& norm_weight,
                                                 const torch::Tensor& norm_bias, double eps,
                                                 const torch::Tensor& weight,
                                                 const torch::Tensor& bias, bool gelu) {
  TORCH_CHECK(weight.dim() == 2 && x.size(-1) == weight.size(1), "NormGemv: x ", x.sizes(),
              " and the weight ", weight.sizes(), " do not match");
  TORCH_CHECK(!residual.defined() || residual.sizes() == x.sizes(), "NormGemv: the residual ",
              residual.sizes(), " does not match x ", x.sizes());
#if MT_KERNELS_WITH_CUDA
  if (NormGemvAvailable(x, norm_weight, weight)) {
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor rc = residual.defined() ? residual.contiguous() : residual;
    const int64_t in = x.size(-1);
    if ((!bias.defined() || KernelVector(bias, x, weight.size(0))) &&
        KernelVector(norm_bias, x, in) && Aligned16(norm_bias) && Aligned16(xc) &&
        (!rc.defined() || (KernelVector(rc, x, x.numel()) && Aligned16(rc)))) {
      GemvArgs args;
      torch::Tensor sum = xc;
      if (rc.defined()) {
        sum = torch::empty_like(xc);
        args.residual = rc.data_ptr();
        args.sum = sum.data_ptr();
      }
      args.norm_weight = norm_weight.data_ptr();
      args.norm_bias = norm_bias.data_ptr();
      args.eps = static_cast<float>(eps);
      return {sum, Launch(xc, weight, bias, gelu, args)};
    }
  }
#endif
  auto [sum, normed] = residual.defined()
                           ? FusedAddLayerNorm(x, residual, norm_weight, norm_bias, eps)
                           : std::make_pair(x, FusedLayerNorm(x, norm_weight, norm_bias, eps));
  return {sum, Gemv(normed, weight, bias, gelu)};
}

}  // namespace mt::kernels
