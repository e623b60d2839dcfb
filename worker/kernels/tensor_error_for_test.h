// How far a kernel's output is from its reference, for the kernels' GPU tests: the worst excess
// over a relative + absolute tolerance, and the worst absolute difference.
#ifndef MT_WORKER_KERNELS_TENSOR_ERROR_FOR_TEST_H_
#define MT_WORKER_KERNELS_TENSOR_ERROR_FOR_TEST_H_

#include <torch/torch.h>

namespace mt::kernels {

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
