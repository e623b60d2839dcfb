#include "worker/kernels/cross_entropy.h"

#include <torch/torch.h>

#include <string>

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "worker/kernels/cross_entropy_launch.h"
#include "worker/kernels/kind_of.h"
#include "worker/kernels/tuned_mm.h"
#endif

namespace mt::kernels {
namespace {

torch::Tensor EagerCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  torch::Tensor l = logits.scalar_type() == torch::kDouble ? logits : logits.to(torch::kFloat);
  return torch::nn::functional::cross_entropy(l, targets);
}

#if MT_KERNELS_WITH_CUDA
// forward: the kernel turns the logits into the gradient of the mean loss (in place) and
// returns the mean; backward: that gradient times the incoming scalar gradient.
class FusedCrossEntropyFunction : public torch::autograd::Function<FusedCrossEntropyFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor logits,
                               torch::Tensor targets) {
    TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
                "FusedCrossEntropy: logits [N, V] and targets [N], got ", logits.sizes(), " and ",
                targets.sizes());
    torch::Tensor work = logits.is_contiguous() ? logits : logits.contiguous();
    torch::Tensor t = targets.to(torch::kLong).contiguous();
    const int64_t rows = work.size(0), vocab = work.size(1);
    torch::Tensor losses = torch::empty({rows}, work.options().dtype(torch::kFloat));
    const cudaError_t err = LaunchFusedCrossEntropy(
        KindOf(work.scalar_type()), work.data_ptr(), t.data_ptr<int64_t>(),
        losses.data_ptr<float>(), rows, vocab, rows > 0 ? 1.0f / static_cast<float>(rows) : 0.0f,
        at::cuda::getCurrentCUDAStream(work.device().index()).stream());
    TORCH_CHECK(err == cudaSuccess, "FusedCrossEntropy launch: ", cudaGetErrorString(err));
    ctx->save_for_backward({work});
    return losses.mean();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    torch::Tensor grad = ctx->get_saved_variables()[0];
    // Used once: scale in place (the usual grad_output is 1 or the loss scale / micro-batches).
    grad.mul_(grad_outputs[0].to(grad.scalar_type()));
    return {grad, torch::Tensor()};
  }
};

// Runs the kernel over `logits` [N, V] (contiguous) in place; returns the per-row losses.
torch::Tensor LossesInPlace(torch::Tensor& logits, const torch::Tensor& targets) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  torch::Tensor losses = torch::empty({rows}, logits.options().dtype(torch::kFloat));
  const cudaError_t err = LaunchFusedCrossEntropy(
      KindOf(logits.scalar_type()), logits.data_ptr(), targets.data_ptr<int64_t>(),
      losses.data_ptr<float>(), rows, vocab, rows > 0 ? 1.0f / static_cast<float>(rows) : 0.0f,
      at::cuda::getCurrentCUDAStream(logits.device().index()).stream());
  TORCH_CHECK(err == cudaSuccess, "FusedLinearCrossEntropy launch: ", cudaGetErrorString(err));
  return losses;
}

// forward: logits = hidden weight^T, turned by the kernel into d mean / d logits (saved);
// backward: the two products, each scaled by the incoming scalar gradient.
class FusedLinearCrossEntropyFunction
    : public torch::autograd::Function<FusedLinearCrossEntropyFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor hidden,
                               torch::Tensor weight, torch::Tensor targets) {
    TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1) &&
                    targets.dim() == 1 && targets.size(0) == hidden.size(0),
                "FusedLinearCrossEntropy: hidden [N, h], weight [V, h] and targets [N], got ",
                hidden.sizes(), ", ", weight.sizes(), " and ", targets.sizes());
    torch::Tensor logits = TunedMm(hidden, weight.t());  // fresh and contiguous
    const torch::Tensor losses = LossesInPlace(logits, targets.to(torch::kLong).contiguous());
    ctx->save_for_backward({hidden, weight, logits});
    return losses.mean();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& hidden = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& dlogits = saved[2];
    // The incoming gradient (a scalar on the device, usually 1) scales both products inside
    // their GEMMs, in fp32 before the one rounding (TunedMm's scale): no pass over d hidden, and
    // no scaled copy of `hidden` [N, h] beside the logits at the step's peak of memory.
    const torch::Tensor g = grad_outputs[0].to(torch::kFloat);
    torch::Tensor dhidden, dweight;
    if (ctx->needs_input_grad(0)) dhidden = TunedMm(dlogits, weight, g);
    if (ctx->needs_input_grad(1)) dweight = TunedMm(dlogits.t(), hidden, g);
    return {dhidden, dweight, torch::Tensor()};
  }
};
#endif

}  // namespace

bool FusedCrossEntropyAvailable(const torch::Tensor& logits) {
#if MT_KERNELS_WITH_CUDA
  // Not fp16: the kernel writes d mean / d logits = (softmax - onehot) / N in the logits' dtype
  // before the incoming gradient (fp16's loss scale) is known, so fp16's five exponent bits
  // flush the small probabilities' gradients to zero (the GPU test LinearMatchesUnfused/Half
  // caught it: 1/N x 1e-5 is below fp16's smallest subnormal). fp16 takes the eager chain, whose
  // gradient is scaled before it is rounded; bf16 has fp32's exponent range.
  const auto t = logits.scalar_type();
  return logits.is_cuda() && (t == torch::kFloat || t == torch::kBFloat16);
#else
  (void)logits;
  return false;
#endif
}

torch::Tensor FusedCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets) {
#if MT_KERNELS_WITH_CUDA
  if (FusedCrossEntropyAvailable(logits)) {
    return FusedCrossEntropyFunction::apply(logits, targets);
  }
#endif
  return EagerCrossEntropy(logits, targets);
}

torch::Tensor FusedLinearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                      const torch::Tensor& targets) {
#if MT_KERNELS_WITH_CUDA
  if (FusedCrossEntropyAvailable(hidden) && weight.scalar_type() == hidden.scalar_type()) {
    return FusedLinearCrossEntropyFunction::apply(hidden, weight, targets);
  }
#endif
  return EagerCrossEntropy(torch::mm(hidden, weight.t()), targets);
}

}  // namespace mt::kernels
