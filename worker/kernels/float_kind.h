// The element type of a kernel's tensors, for the CUDA side (no LibTorch: nvcc compiles the
// launch headers that use it). kind_of.h maps LibTorch's scalar types onto it.
#ifndef MT_WORKER_KERNELS_FLOAT_KIND_H_
#define MT_WORKER_KERNELS_FLOAT_KIND_H_

namespace mt::kernels {

enum class FloatKind { kFloat32, kBFloat16, kFloat16 };

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_FLOAT_KIND_H_
