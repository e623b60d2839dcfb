// The tolerance the linear-layer kernels' GPU tests (Gemv, Int8Linear) hold their outputs to
// against a double-precision reference: fp32 1e-4 relative + 1e-4 absolute (sums in another
// order); bf16 / fp16 the dtype's rounding of outputs that are O(1): 1e-2 relative + 2e-2
// absolute (bf16 keeps 8 bits).
#ifndef MT_WORKER_KERNELS_LINEAR_TOLERANCE_FOR_TEST_H_
#define MT_WORKER_KERNELS_LINEAR_TOLERANCE_FOR_TEST_H_

#include <torch/torch.h>

namespace mt::kernels {

inline double LinearTolerance(torch::ScalarType t, bool relative) {
  if (t == torch::kFloat) return 1e-4;
  return relative ? 1e-2 : 2e-2;
}

// The worst |got - want| - (atol + rtol |want|) over the tensor; <= 0 passes.
inline double LinearExcess(const torch::Tensor& got, const torch::Tensor& want,
                           torch::ScalarType t) {
  const torch::Tensor g = got.to(torch::kDouble).cpu(), w = want.to(torch::kDouble).cpu();
  return ((g - w).abs() - (LinearTolerance(t, false) + LinearTolerance(t, true) * w.abs()))
      .max()
      .item<double>();
}

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_LINEAR_TOLERANCE_FOR_TEST_H_
