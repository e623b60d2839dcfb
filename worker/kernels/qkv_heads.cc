#include "worker/kernels/qkv_heads.h"

#include <torch/torch.h>

#include "worker/kernels/column_sum.h"
#include "worker/kernels/kind_of.h"
#include "worker/kernels/tuned_mm.h"

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "worker/kernels/column_sum_launch.h"
#include "worker/kernels/qkv_heads_launch.h"
#endif

namespace mt::kernels {
namespace {

// The projection's shape: its output [batch * seq, heads * 3 * head_dim].
struct Dims {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

#if MT_KERNELS_WITH_CUDA
// Whether the gather kernel takes these gradients: CUDA tensors of `like`'s dtype whose head
// dimension is contiguous and whose other strides, start and head_dim are whole 16-byte vectors.
bool GatherTakes(const torch::autograd::variable_list& grads, const torch::Tensor& like,
                 const Dims& shape) {
  const int64_t vec = 16 / static_cast<int64_t>(like.element_size());
  if (!like.is_cuda() || shape.head_dim % vec != 0 ||
      ColumnSumChunks(shape.batch * shape.seq) > 65535) {
    return false;
  }
  for (const torch::Tensor& g : grads) {
    if (!g.is_cuda() || g.scalar_type() != like.scalar_type() || g.stride(3) != 1 ||
        g.stride(0) % vec != 0 || g.stride(1) % vec != 0 || g.stride(2) % vec != 0 ||
        !Aligned16(g)) {
      return false;
    }
  }
  return true;
}

// dqkv and db by the kernel (GatherTakes holds).
void Gather(const torch::autograd::variable_list& grads, const Dims& dims,
            const torch::Tensor& dqkv, const torch::Tensor& db) {
  HeadsGrad in[3];
  for (int p = 0; p < 3; ++p) {
    in[p] =
        HeadsGrad{grads[p].data_ptr(), grads[p].stride(0), grads[p].stride(1), grads[p].stride(2)};
  }
  const torch::Tensor partial = torch::empty({ColumnSumChunks(dqkv.size(0)), dqkv.size(1)},
                                             dqkv.options().dtype(torch::kFloat));
  const QkvShape shape{dims.batch, dims.seq, dims.heads, dims.head_dim};
  const cudaError_t err = LaunchQkvGradGather(
      KindOf(dqkv.scalar_type()), in, shape, dqkv.data_ptr(), partial.data_ptr<float>(),
      db.data_ptr(), at::cuda::getCurrentCUDAStream(dqkv.device().index()).stream());
  TORCH_CHECK(err == cudaSuccess, "QkvHeads gradient gather: ", cudaGetErrorString(err));
}
#endif

// The projection's output gradient [b * s, heads * 3d] and the bias gradient from dq, dk, dv
// (each defined, [b, heads, s, d]).
std::pair<torch::Tensor, torch::Tensor> OutputGradient(const torch::autograd::variable_list& grads,
                                                       const torch::Tensor& like,
                                                       const Dims& shape) {
  const int64_t rows = shape.batch * shape.seq;
  const int64_t cols = shape.heads * 3 * shape.head_dim;
#if MT_KERNELS_WITH_CUDA
  if (GatherTakes(grads, like, shape)) {
    torch::Tensor dqkv = torch::empty({rows, cols}, like.options());
    torch::Tensor db = torch::empty({cols}, like.options());
    Gather(grads, shape, dqkv, db);
    return {dqkv, db};
  }
#endif
  // What the backward of split and transpose computes, then the bias gradient's sum.
  torch::Tensor dqkv =
      torch::cat({grads[0].transpose(1, 2), grads[1].transpose(1, 2), grads[2].transpose(1, 2)}, -1)
          .reshape({rows, cols});
  return {dqkv, ColumnSum(dqkv)};
}

// Inputs: x [b, s, in], w, b, then heads and head_dim. Saves x and w (as a linear layer does).
class QkvHeadsFunction : public torch::autograd::Function<QkvHeadsFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                torch::Tensor x, torch::Tensor w, torch::Tensor b,
                                                int64_t heads, int64_t head_dim) {
    const int64_t batch = x.size(0), seq = x.size(1);
    const torch::Tensor rows = x.reshape({batch * seq, x.size(2)});
    ctx->save_for_backward({rows, w});
    ctx->saved_data["batch"] = batch;
    ctx->saved_data["seq"] = seq;
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["head_dim"] = head_dim;
    const std::vector<torch::Tensor> parts =
        TunedAddmm(b, rows, w.t()).view({batch, seq, heads, 3 * head_dim}).split(head_dim, -1);
    return {parts[0].transpose(1, 2), parts[1].transpose(1, 2), parts[2].transpose(1, 2)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& rows = saved[0];
    const torch::Tensor& w = saved[1];
    const Dims shape{ctx->saved_data["batch"].toInt(), ctx->saved_data["seq"].toInt(),
                     ctx->saved_data["heads"].toInt(), ctx->saved_data["head_dim"].toInt()};
    for (torch::Tensor& g : grads) {
      if (!g.defined()) {
        g = torch::zeros({shape.batch, shape.heads, shape.seq, shape.head_dim}, w.options());
      }
    }
    const auto [dqkv, db] = OutputGradient(grads, w, shape);
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(1)) dw = TunedMm(dqkv.t(), rows);
    // d input last: the LayerNorm backward that reads it next finds it in L2.
    if (ctx->needs_input_grad(0)) {
      dx = TunedMm(dqkv, w).view({shape.batch, shape.seq, rows.size(1)});
    }
    return {dx, dw, ctx->needs_input_grad(2) ? db : torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

bool QkvHeadsAvailable(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                       int64_t heads, int64_t head_dim) {
#if MT_KERNELS_WITH_CUDA
  if (!torch::GradMode::is_enabled() || !x.defined() || !w.defined() || !b.defined()) {
    return false;
  }
  const auto t = x.scalar_type();
  for (const torch::Tensor* p : {&x, &w, &b}) {
    if (!p->is_cuda() || p->scalar_type() != t || !p->requires_grad()) return false;
  }
  if (!KernelFloat(t) || x.dim() != 3 || w.dim() != 2 || b.dim() != 1 || heads <= 0 ||
      head_dim <= 0) {
    return false;
  }
  const int64_t vec = 16 / static_cast<int64_t>(x.element_size());
  return w.size(0) == heads * 3 * head_dim && w.size(1) == x.size(2) && b.size(0) == w.size(0) &&
         head_dim % vec == 0;
#else
  (void)x, (void)w, (void)b, (void)heads, (void)head_dim;
  return false;
#endif
}

std::vector<torch::Tensor> QkvHeads(const torch::Tensor& x, const torch::Tensor& w,
                                    const torch::Tensor& b, int64_t heads, int64_t head_dim) {
  TORCH_CHECK(
      x.dim() == 3 && w.dim() == 2 && b.dim() == 1 && heads > 0 && head_dim > 0 &&
          w.size(0) == heads * 3 * head_dim && w.size(1) == x.size(2) && b.size(0) == w.size(0) &&
          (KernelFloat(x.scalar_type()) || x.scalar_type() == torch::kDouble),
      "QkvHeads: x [b, s, in], w [heads * 3 * head_dim, in] and b [heads * 3 * head_dim] "
      "with heads ",
      heads, " and head_dim ", head_dim, ", got ", x.sizes(), ", ", w.sizes(), " and ", b.sizes());
  return QkvHeadsFunction::apply(x, w, b, heads, head_dim);
}

}  // namespace mt::kernels
