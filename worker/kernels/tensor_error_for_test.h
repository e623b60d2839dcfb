// How far a kernel's output is from its reference, for the kernels' GPU tests: the worst excess
// over a relative + absolute tolerance, the worst absolute difference, and the rounding unit of
// a 16-bit output.
#ifndef MT_WORKER_KERNELS_TENSOR_ERROR_FOR_TEST_H_
#define MT_WORKER_KERNELS_TENSOR_ERROR_FOR_TEST_H_

#include <torch/torch.h>

#include <cmath>

namespace mt::kernels {

// The relative error of rounding an exact value to `t`: 2^-8 bf16, 2^-11 fp16, 0 for fp32 (a
// kernel's fp32 output is held to its sums' own bound instead).
inline double RoundingUnit(torch::ScalarType t) {
  if (t == torch::kBFloat16) return std::ldexp(1.0, -8);
  if (t == torch::kHalf) return std::ldexp(1.0, -11);
  return 0.0;
}

// The worst |got - want| - (atol + rtol |want|) over the tensor; <= 0 passes.
inline double Excess(const torch::Tensor& got, const torch::Tensor& want, double rtol,
                     double atol) {
  return ((got - want).abs() - (atol + rtol * want.abs())).max().item<double>();
}

// The worst |got - want| over the tensor.
inline double MaxError(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).abs().max().item<double>();
}

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_TENSOR_ERROR_FOR_TEST_H_
