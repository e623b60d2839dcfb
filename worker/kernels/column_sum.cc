#include "worker/kernels/column_sum.h"

#include <torch/torch.h>

#include "worker/kernels/tuned_mm.h"

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "worker/kernels/column_sum_launch.h"
#include "worker/kernels/kind_of.h"
#endif

namespace mt::kernels {
namespace {

#if MT_KERNELS_WITH_CUDA
bool KernelTakes(const torch::Tensor& x) {
  const auto t = x.scalar_type();
  if (!x.is_cuda() || x.dim() != 2 || !x.is_contiguous() || x.size(0) == 0 || x.size(1) == 0 ||
      !KernelFloat(t)) {
    return false;
  }
  const int64_t vec = 16 / static_cast<int64_t>(x.element_size());
  return x.size(1) % vec == 0 && Aligned16(x) && ColumnSumChunks(x.size(0)) <= 65535;
}
#endif

// Inputs x, w, b, with_bias (false: b is an empty tensor, never read: autograd records every
// tensor input's device, so an undefined tensor cannot be passed).
class LinearWithBiasFunction : public torch::autograd::Function<LinearWithBiasFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor w, torch::Tensor b, bool with_bias) {
    ctx->save_for_backward({x, w});
    return with_bias ? TunedAddmm(b, x, w.t()) : TunedMm(x, w.t());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    const torch::Tensor dy = grad_outputs[0].contiguous();
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(1)) dw = TunedMm(dy.t(), x);
    if (ctx->needs_input_grad(2)) db = ColumnSum(dy);
    // d input last: the kernel that reads it next (the attention's backward after the output
    // projection) finds it in L2.
    if (ctx->needs_input_grad(0)) dx = TunedMm(dy, w);
    return {dx, dw, db, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor ColumnSum(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, "ColumnSum: x must be 2-D, got ", x.sizes());
#if MT_KERNELS_WITH_CUDA
  if (KernelTakes(x)) {
    const int64_t rows = x.size(0), cols = x.size(1);
    torch::Tensor out = torch::empty({cols}, x.options());
    torch::Tensor partial =
        torch::empty({ColumnSumChunks(rows), cols}, x.options().dtype(torch::kFloat));
    const cudaError_t err = LaunchColumnSum(
        KindOf(x.scalar_type()), x.data_ptr(), out.data_ptr(), partial.data_ptr<float>(), rows,
        cols, at::cuda::getCurrentCUDAStream(x.device().index()).stream());
    TORCH_CHECK(err == cudaSuccess, "ColumnSum launch: ", cudaGetErrorString(err));
    return out;
  }
#endif
  return x.sum(0);
}

torch::Tensor LinearWithBias(const torch::Tensor& x, const torch::Tensor& w,
                             const torch::Tensor& b) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && b.dim() == 1 && x.size(1) == w.size(1) &&
                  b.size(0) == w.size(0),
              "LinearWithBias: x [N, in], w [out, in] and b [out], got ", x.sizes(), ", ",
              w.sizes(), " and ", b.sizes());
  return LinearWithBiasFunction::apply(x, w, b, /*with_bias=*/true);
}

torch::Tensor LinearWithoutBias(const torch::Tensor& x, const torch::Tensor& w) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
              "LinearWithoutBias: x [N, in] and w [out, in], got ", x.sizes(), " and ", w.sizes());
  return LinearWithBiasFunction::apply(x, w, torch::empty({0}, w.options()), /*with_bias=*/false);
}

}  // namespace mt::kernels
