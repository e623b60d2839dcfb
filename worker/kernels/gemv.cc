#include "worker/kernels/gemv.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "worker/kernels/gemv_launch.h"
#include "worker/kernels/kind_of.h"
#endif

namespace mt::kernels {

bool GemvAvailable(const torch::Tensor& x, const torch::Tensor& weight) {
#if MT_KERNELS_WITH_CUDA
  const auto t = x.scalar_type();
  if (!x.is_cuda() || !weight.is_cuda() || weight.scalar_type() != t ||
      (t != torch::kFloat && t != torch::kBFloat16 && t != torch::kHalf) || x.dim() < 1 ||
      weight.dim() != 2) {
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
    const bool bias_ok =
        !bias.defined() || (bias.scalar_type() == x.scalar_type() && bias.is_cuda() &&
                            bias.is_contiguous() && bias.numel() == weight.size(0) &&
                            (!torch::GradMode::is_enabled() || !bias.requires_grad()));
    if (bias_ok && Aligned16(xc)) {
      const int64_t in = xc.size(-1), out = weight.size(0);
      std::vector<int64_t> sizes = xc.sizes().vec();
      sizes.back() = out;
      torch::Tensor y = torch::empty(sizes, xc.options());
      GemvArgs args;
      args.x = xc.data_ptr();
      args.w = weight.data_ptr();
      args.bias = bias.defined() ? bias.data_ptr() : nullptr;
      args.gelu = gelu;
      args.y = y.data_ptr();
      args.rows = xc.numel() / in;
      args.out = out;
      args.in = in;
      const cudaError_t err =
          LaunchGemv(KindOf(xc.scalar_type()), args,
                     at::cuda::getCurrentCUDAStream(xc.device().index()).stream());
      TORCH_CHECK(err == cudaSuccess, "Gemv launch: ", cudaGetErrorString(err));
      return y;
    }
  }
#endif
  torch::Tensor y = torch::nn::functional::linear(x, weight, bias);
  return gelu ? torch::gelu(y, "tanh") : y;
}

}  // namespace mt::kernels
