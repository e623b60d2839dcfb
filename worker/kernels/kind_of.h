// What the kernels' LibTorch wrappers check of a tensor before they hand its pointer to a
// kernel (the LibTorch side of float_kind.h): its scalar type as a FloatKind, and whether its
// data start on a 16-byte boundary (the kernels' vector loads).
#ifndef MT_WORKER_KERNELS_KIND_OF_H_
#define MT_WORKER_KERNELS_KIND_OF_H_

#include <torch/types.h>

#include <cstdint>

#include "worker/kernels/float_kind.h"

namespace mt::kernels {

// bf16 and fp16 as themselves; every other type as fp32 (callers pass fp32, bf16 or fp16 only).
inline FloatKind KindOf(torch::ScalarType t) {
  switch (t) {
    case torch::kBFloat16:
      return FloatKind::kBFloat16;
    case torch::kHalf:
      return FloatKind::kFloat16;
    default:
      return FloatKind::kFloat32;
  }
}

// fp32, bf16 or fp16: the element types the kernels are built for.
inline bool KernelFloat(torch::ScalarType t) {
  return t == torch::kFloat || t == torch::kBFloat16 || t == torch::kHalf;
}

inline bool Aligned16(const torch::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_KIND_OF_H_
