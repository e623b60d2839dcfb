#include "worker/kernels/embedding.h"

#include <torch/torch.h>

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "worker/kernels/embedding_launch.h"
#include "worker/kernels/kind_of.h"
#endif

namespace mt::kernels {
namespace {

#if MT_KERNELS_WITH_CUDA
// The kernel's scratch bytes for grad2 [n, cols] (contiguous) and flat tokens [n], or 0 where
// the kernel does not take them.
size_t KernelScratch(const torch::Tensor& grad2, const torch::Tensor& flat, int64_t rows) {
  if (!grad2.is_cuda() || !KernelFloat(grad2.scalar_type()) || flat.scalar_type() != torch::kLong ||
      flat.device() != grad2.device() || grad2.size(0) == 0 || grad2.size(1) == 0) {
    return 0;
  }
  const int64_t vec = 16 / static_cast<int64_t>(grad2.element_size());
  if (grad2.size(1) % vec != 0 || !Aligned16(grad2)) return 0;
  return EmbeddingBackwardScratchBytes(grad2.size(0), rows, grad2.size(1));
}
#endif

class EmbeddingFunction : public torch::autograd::Function<EmbeddingFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor weight,
                               torch::Tensor tokens) {
    ctx->save_for_backward({tokens});
    ctx->saved_data["rows"] = weight.size(0);
    return torch::embedding(weight, tokens);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::Tensor tokens = ctx->get_saved_variables()[0];
    const int64_t rows = ctx->saved_data["rows"].toInt();
    return {EmbeddingBackward(grad_outputs[0], tokens, rows), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor Embedding(const torch::Tensor& weight, const torch::Tensor& tokens) {
  TORCH_CHECK(weight.dim() == 2, "Embedding: weight must be [rows, cols], got ", weight.sizes());
  TORCH_CHECK(tokens.scalar_type() == torch::kLong, "Embedding: tokens must be int64, got ",
              tokens.scalar_type());
  return EmbeddingFunction::apply(weight, tokens);
}

torch::Tensor EmbeddingBackward(const torch::Tensor& grad, const torch::Tensor& tokens,
                                int64_t rows) {
  TORCH_CHECK(
      grad.dim() == tokens.dim() + 1 && grad.sizes().slice(0, tokens.dim()) == tokens.sizes(),
      "EmbeddingBackward: grad must be [tokens..., cols] for tokens ", tokens.sizes(), ", got ",
      grad.sizes());
#if MT_KERNELS_WITH_CUDA
  const int64_t cols = grad.size(-1);
  const torch::Tensor grad2 = grad.reshape({-1, cols}).contiguous();
  const torch::Tensor flat = tokens.reshape({-1}).contiguous();
  if (const size_t bytes = KernelScratch(grad2, flat, rows); bytes > 0) {
    const int64_t n = grad2.size(0);
    torch::Tensor out = torch::empty({rows, cols}, grad2.options());
    torch::Tensor scratch =
        torch::empty({static_cast<int64_t>(bytes)}, grad2.options().dtype(torch::kByte));
    const cudaError_t err = LaunchEmbeddingBackward(
        KindOf(grad2.scalar_type()), grad2.data_ptr(), flat.data_ptr<int64_t>(), n, rows, cols,
        out.data_ptr(), scratch.data_ptr(), bytes,
        at::cuda::getCurrentCUDAStream(grad2.device().index()).stream());
    TORCH_CHECK(err == cudaSuccess, "EmbeddingBackward launch: ", cudaGetErrorString(err));
    return out;
  }
#endif
  return torch::embedding_backward(grad, tokens, rows, /*padding_idx=*/-1,
                                   /*scale_grad_by_freq=*/false, /*sparse=*/false);
}

}  // namespace mt::kernels
