// The CUDA side of int8_linear.h: plain pointers, no LibTorch (keeps nvcc off its headers).
#ifndef MT_WORKER_KERNELS_INT8_LINEAR_LAUNCH_H_
#define MT_WORKER_KERNELS_INT8_LINEAR_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/float_kind.h"

namespace mt::kernels {

// The most rows of x the GEMV takes. Each lane reads every row of x for each 16 weights it
// loads, so its cost grows with the rows: on an H100 at GPT-2 1.3B's shapes it beats bf16
// weights at one row and loses at 16 (bench/RESULTS.md); more rows take the dequantized path.
inline constexpr int64_t kInt8GemvMaxRows = 4;

// y[r, j] = act(sum_i x[r, i] * q[j, i] * scale[j] + bias[j]) for r < rows <= kInt8GemvMaxRows:
// products and sums in fp32, y rounded once to the kind; act is the identity or, with `gelu`,
// tanh-approximated GELU. x [rows, in] and y [rows, out] contiguous of `kind`, q int8 [out, in]
// row-major, scale fp32 [out], bias of `kind` [out] or null. in % 16 == 0 and every pointer
// 16-byte aligned (the caller checks).
cudaError_t LaunchInt8Gemv(FloatKind kind, const void* x, const int8_t* q, const float* scale,
                           const void* bias, bool gelu, void* y, int64_t rows, int64_t out,
                           int64_t in, cudaStream_t stream);

// w[j, i] = q[j, i] * scale[j] rounded once to the kind (w contiguous [out, in] of `kind`).
cudaError_t LaunchInt8Dequantize(FloatKind kind, const int8_t* q, const float* scale, void* w,
                                 int64_t out, int64_t in, cudaStream_t stream);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_INT8_LINEAR_LAUNCH_H_
