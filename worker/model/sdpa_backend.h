// at::scaled_dot_product_attention restricted to one of LibTorch's fused kernels (cuDNN's or
// flash attention), for AttentionBackend::kCudnn / kFlash. LibTorch picks its kernel from
// process-wide switches (at::globalContext().setSDPUse*); this sets them for the one call and
// puts them back, under a lock, so concurrent callers (one thread per rank in tests and
// benchmarks) never see each other's choice. The backward runs the kernel the forward chose
// (its autograd node is that kernel's), whatever the switches say then.
#ifndef MT_WORKER_MODEL_SDPA_BACKEND_H_
#define MT_WORKER_MODEL_SDPA_BACKEND_H_

#include <torch/types.h>

#include "worker/model/gpt_config.h"

namespace mt::model {

// True when this LibTorch can run `backend` at all (kCudnn: >= 2.3 with CUDA; kFlash: >= 2.0
// with CUDA; the others: see FusedAttentionAvailable).
bool SdpaBackendAvailable(AttentionBackend backend);

// Causal SDPA on q, k, v [b, heads, s, d] with only `backend`'s kernel allowed (kCudnn or
// kFlash). Throws c10::Error (LibTorch's "no available kernel" with its reasons) where that
// kernel cannot take these inputs (CPU tensors, an unsupported dtype or head size).
torch::Tensor RestrictedCausalSdpa(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, double dropout_p,
                                   AttentionBackend backend);

}  // namespace mt::model

#endif  // MT_WORKER_MODEL_SDPA_BACKEND_H_
