#include "worker/kernels/decode_attention.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "worker/kernels/decode_attention_launch.h"
#include "worker/kernels/kind_of.h"
#endif

namespace mt::kernels {
namespace {

void CheckShapes(const torch::Tensor& q, const torch::Tensor& k_new, const torch::Tensor& v_new,
                 const torch::Tensor& position, const torch::Tensor& k_cache,
                 const torch::Tensor& v_cache) {
  TORCH_CHECK(
      q.dim() == 4 && q.size(1) == 1 && k_new.sizes() == q.sizes() && v_new.sizes() == q.sizes(),
      "DecodeAttention: q, k_new, v_new [b, 1, heads, d] expected, got ", q.sizes(), ", ",
      k_new.sizes(), ", ", v_new.sizes());
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes() &&
                  k_cache.size(0) == q.size(0) && k_cache.size(1) == q.size(2) &&
                  k_cache.size(3) == q.size(3) && k_cache.size(2) >= 1,
              "DecodeAttention: caches [", q.size(0), ", ", q.size(2), ", max_len, ", q.size(3),
              "] expected, got ", k_cache.sizes(), " and ", v_cache.sizes());
  TORCH_CHECK(position.numel() == 1, "DecodeAttention: one position expected, got ",
              position.sizes());
  const auto t = q.scalar_type();
  TORCH_CHECK(k_new.scalar_type() == t && v_new.scalar_type() == t && k_cache.scalar_type() == t &&
                  v_cache.scalar_type() == t,
              "DecodeAttention: q, k_new, v_new and the caches must share one dtype");
}

// index_copy_ into the caches, then the attention over the whole cache with the entries after
// the position masked off, in fp32 (fp64 for fp64 inputs).
torch::Tensor Eager(const torch::Tensor& q, const torch::Tensor& k_new, const torch::Tensor& v_new,
                    const torch::Tensor& position, const torch::Tensor& k_cache,
                    const torch::Tensor& v_cache) {
  const int64_t b = q.size(0), heads = q.size(2), d = q.size(3), max_len = k_cache.size(2);
  const torch::Tensor index = position.reshape({1}).to(k_cache.device(), torch::kLong);
  torch::Tensor keys = k_cache, values = v_cache;  // handles: the writes land in the caches
  keys.index_copy_(2, index, k_new.transpose(1, 2));
  values.index_copy_(2, index, v_new.transpose(1, 2));
  const auto acc = q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  const torch::Tensor after = torch::arange(max_len, index.options()).gt(index);
  const torch::Tensor mask =
      torch::zeros({max_len}, q.options().dtype(acc).device(k_cache.device()))
          .masked_fill_(after, -std::numeric_limits<double>::infinity());
  torch::Tensor scores =
      torch::matmul(q.transpose(1, 2).to(acc), keys.to(acc).transpose(-2, -1));  // [b, h, 1, L]
  scores.mul_(1.0 / std::sqrt(static_cast<double>(d))).add_(mask);
  const torch::Tensor context = torch::matmul(torch::softmax(scores, -1), values.to(acc));
  return context.to(q.scalar_type()).transpose(1, 2).reshape({b, 1, heads * d});
}

#if MT_KERNELS_WITH_CUDA
// A token tensor [b, 1, heads, d] the kernel reads by 16-byte vectors.
bool VectorReadable(const torch::Tensor& t, int64_t vec) {
  return t.stride(3) == 1 && (t.size(0) == 1 || t.stride(0) % vec == 0) &&
         (t.size(2) == 1 || t.stride(2) % vec == 0) && Aligned16(t);
}
#endif

}  // namespace

bool DecodeAttentionAvailable(const torch::Tensor& q, const torch::Tensor& k_new,
                              const torch::Tensor& v_new, const torch::Tensor& position,
                              const torch::Tensor& k_cache, const torch::Tensor& v_cache) {
#if MT_KERNELS_WITH_CUDA
  for (const torch::Tensor* t : {&q, &k_new, &v_new, &position, &k_cache, &v_cache}) {
    if (!t->defined() || !t->is_cuda() || t->device() != q.device()) return false;
  }
  const auto t = q.scalar_type();
  if (!KernelFloat(t)) return false;
  for (const torch::Tensor* x : {&k_new, &v_new, &k_cache, &v_cache}) {
    if (x->scalar_type() != t) return false;
  }
  if (position.scalar_type() != torch::kLong || position.numel() != 1) return false;
  if (q.dim() != 4 || q.size(1) != 1 || q.size(0) < 1 || q.size(2) < 1 ||
      k_new.sizes() != q.sizes() || v_new.sizes() != q.sizes() || k_cache.dim() != 4 ||
      v_cache.sizes() != k_cache.sizes() || k_cache.size(0) != q.size(0) ||
      k_cache.size(1) != q.size(2) || k_cache.size(2) < 1 || k_cache.size(3) != q.size(3)) {
    return false;
  }
  const int64_t vec = 16 / q.element_size();
  return DecodeAttentionHeadDimSupported(q.size(3)) && VectorReadable(q, vec) &&
         VectorReadable(k_new, vec) && VectorReadable(v_new, vec) && k_cache.is_contiguous() &&
         v_cache.is_contiguous() && Aligned16(k_cache) && Aligned16(v_cache);
#else
  (void)q;
  (void)k_new;
  (void)v_new;
  (void)position;
  (void)k_cache;
  (void)v_cache;
  return false;
#endif
}

torch::Tensor DecodeAttention(const torch::Tensor& q, const torch::Tensor& k_new,
                              const torch::Tensor& v_new, const torch::Tensor& position,
                              const torch::Tensor& k_cache, const torch::Tensor& v_cache) {
  CheckShapes(q, k_new, v_new, position, k_cache, v_cache);
  torch::NoGradGuard no_grad;
#if MT_KERNELS_WITH_CUDA
  if (DecodeAttentionAvailable(q, k_new, v_new, position, k_cache, v_cache)) {
    const c10::cuda::CUDAGuard guard(q.device());
    const int64_t b = q.size(0), heads = q.size(2), d = q.size(3), max_len = k_cache.size(2);
    const int sms = at::cuda::getDeviceProperties(q.device().index())->multiProcessorCount;
    DecodeAttentionArgs args;
    args.splits = DecodeAttentionSplits(b, heads, max_len, sms);
    const int64_t scratch = DecodeAttentionScratchFloats(b, heads, d, args.splits);
    torch::Tensor partial =
        scratch > 0 ? torch::empty({scratch}, q.options().dtype(torch::kFloat)) : torch::Tensor();
    torch::Tensor out = torch::empty({b, 1, heads * d}, q.options());
    args.q = q.data_ptr();
    args.k_new = k_new.data_ptr();
    args.v_new = v_new.data_ptr();
    args.q_batch_stride = q.stride(0);
    args.q_head_stride = q.stride(2);
    args.k_batch_stride = k_new.stride(0);
    args.k_head_stride = k_new.stride(2);
    args.v_batch_stride = v_new.stride(0);
    args.v_head_stride = v_new.stride(2);
    args.position = position.data_ptr<int64_t>();
    args.k_cache = k_cache.data_ptr();
    args.v_cache = v_cache.data_ptr();
    args.out = out.data_ptr();
    args.partial = scratch > 0 ? partial.data_ptr<float>() : nullptr;
    args.batch = b;
    args.heads = heads;
    args.max_len = max_len;
    args.head_dim = d;
    const cudaError_t err = LaunchDecodeAttention(
        KindOf(q.scalar_type()), args, at::cuda::getCurrentCUDAStream(q.device().index()).stream());
    TORCH_CHECK(err == cudaSuccess, "DecodeAttention launch: ", cudaGetErrorString(err));
    return out;
  }
#endif
  return Eager(q, k_new, v_new, position, k_cache, v_cache);
}

}  // namespace mt::kernels
