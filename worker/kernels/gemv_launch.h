// The CUDA side of gemv.h: plain pointers, no LibTorch (keeps nvcc off its headers).
#ifndef MT_WORKER_KERNELS_GEMV_LAUNCH_H_
#define MT_WORKER_KERNELS_GEMV_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/float_kind.h"

namespace mt::kernels {

// The most rows of x the GEMV takes: each lane reads every row of x (through L1) for each 16
// bytes of weight it streams, so past a few rows the reads of x, not the weight, bound it.
inline constexpr int64_t kGemvMaxRows = 4;

// y[r, j] = act(sum_i x[r, i] * w[j, i] + bias[j]) for r < rows <= kGemvMaxRows: products and
// sums in fp32, y rounded once to the kind; act is the identity or, with `gelu`, the
// tanh-approximated GELU. x [rows, in], w [out, in] and y [rows, out] contiguous of `kind`, bias
// [out] of `kind` or null. in a multiple of 16 bytes' elements and every pointer 16-byte
// aligned (the caller checks).
cudaError_t LaunchGemv(FloatKind kind, const void* x, const void* w, const void* bias, bool gelu,
                       void* y, int64_t rows, int64_t out, int64_t in, cudaStream_t stream);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_GEMV_LAUNCH_H_
