// LibTorch's scalar type as the kernels' FloatKind (the LibTorch side of float_kind.h).
#ifndef MT_WORKER_KERNELS_KIND_OF_H_
#define MT_WORKER_KERNELS_KIND_OF_H_

#include <torch/types.h>

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

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_KIND_OF_H_
