#include "worker/kernels/int8_linear.h"

#include <torch/torch.h>

#include <vector>

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "worker/kernels/int8_linear_launch.h"
#include "worker/kernels/kind_of.h"
#endif

namespace mt::kernels {
namespace {

// DequantizeInt8 by one kernel where it runs (a CUDA weight of a kernel dtype, in % 16 == 0):
// the same values, without the fp32 intermediate.
torch::Tensor DequantizeFast(const Int8Weight& weight, torch::ScalarType dtype) {
#if MT_KERNELS_WITH_CUDA
  const int64_t out = weight.q.size(0), in = weight.q.size(1);
  if (weight.q.is_cuda() && weight.q.is_contiguous() && weight.scale.is_contiguous() &&
      weight.scale.scalar_type() == torch::kFloat && in % 16 == 0 && Aligned16(weight.q) &&
      (dtype == torch::kFloat || dtype == torch::kBFloat16 || dtype == torch::kHalf)) {
    torch::Tensor w = torch::empty({out, in}, weight.q.options().dtype(dtype));
    const cudaError_t err = LaunchInt8Dequantize(
        KindOf(dtype), weight.q.data_ptr<int8_t>(), weight.scale.data_ptr<float>(), w.data_ptr(),
        out, in, at::cuda::getCurrentCUDAStream(weight.q.device().index()).stream());
    TORCH_CHECK(err == cudaSuccess, "Int8 dequantize launch: ", cudaGetErrorString(err));
    return w;
  }
#endif
  return DequantizeInt8(weight, dtype);
}

}  // namespace

Int8Weight QuantizeInt8(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.is_floating_point(),
              "QuantizeInt8: want a floating weight [out, in], got ", weight.scalar_type(), " ",
              weight.sizes());
  torch::NoGradGuard no_grad;
  const torch::Tensor w = weight.to(torch::kFloat);
  torch::Tensor scale = w.abs().amax(1).div(127.0);
  scale = torch::where(scale.gt(0), scale, torch::ones_like(scale));
  const torch::Tensor q = w.div(scale.unsqueeze(1)).round().clamp(-127, 127).to(torch::kChar);
  return {q.contiguous(), scale.contiguous()};
}

torch::Tensor DequantizeInt8(const Int8Weight& weight, torch::ScalarType dtype) {
  return weight.q.to(torch::kFloat).mul(weight.scale.unsqueeze(1)).to(dtype);
}

bool Int8GemvAvailable(const torch::Tensor& x, const Int8Weight& weight) {
#if MT_KERNELS_WITH_CUDA
  const auto t = x.scalar_type();
  if (!x.is_cuda() || !weight.q.is_cuda() || !weight.scale.is_cuda() || !KernelFloat(t) ||
      x.dim() < 1) {
    return false;
  }
  const int64_t in = x.size(-1);
  const int64_t rows = in > 0 ? x.numel() / in : 0;
  return rows >= 1 && rows <= kInt8GemvMaxRows && in % 16 == 0 && weight.q.size(1) == in &&
         weight.q.is_contiguous() && weight.scale.scalar_type() == torch::kFloat &&
         Aligned16(weight.q);
#else
  (void)x;
  (void)weight;
  return false;
#endif
}

torch::Tensor Int8Linear(const torch::Tensor& x, const Int8Weight& weight,
                         const torch::Tensor& bias, bool gelu) {
  TORCH_CHECK(weight.q.dim() == 2 && x.size(-1) == weight.q.size(1), "Int8Linear: x ", x.sizes(),
              " and the weight ", weight.q.sizes(), " do not match");
  torch::NoGradGuard no_grad;
#if MT_KERNELS_WITH_CUDA
  const torch::Tensor xc = x.contiguous();
  const bool bias_ok = !bias.defined() || (bias.scalar_type() == x.scalar_type() &&
                                           bias.is_cuda() && bias.is_contiguous());
  if (bias_ok && Int8GemvAvailable(xc, weight) && Aligned16(xc)) {
    const int64_t in = xc.size(-1), out = weight.q.size(0);
    std::vector<int64_t> sizes = xc.sizes().vec();
    sizes.back() = out;
    torch::Tensor y = torch::empty(sizes, xc.options());
    const cudaError_t err =
        LaunchInt8Gemv(KindOf(xc.scalar_type()), xc.data_ptr(), weight.q.data_ptr<int8_t>(),
                       weight.scale.data_ptr<float>(), bias.defined() ? bias.data_ptr() : nullptr,
                       gelu, y.data_ptr(), xc.numel() / in, out, in,
                       at::cuda::getCurrentCUDAStream(xc.device().index()).stream());
    TORCH_CHECK(err == cudaSuccess, "Int8Linear launch: ", cudaGetErrorString(err));
    return y;
  }
#endif
  torch::Tensor y = torch::nn::functional::linear(x, DequantizeFast(weight, x.scalar_type()), bias);
  return gelu ? torch::gelu(y, "tanh") : y;
}

}  // namespace mt::kernels
