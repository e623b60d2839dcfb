// The CUDA side of gemv.h: plain pointers, no LibTorch (keeps nvcc off its headers).
#ifndef MT_WORKER_KERNELS_GEMV_LAUNCH_H_
#define MT_WORKER_KERNELS_GEMV_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/float_kind.h"

namespace mt::kernels {

// Rows of x the CUDA-core kernel takes (any kind): each lane reads every row of x for each 16
// bytes of weight it streams, so past a few rows the reads of x, not the weight, bound it.
inline constexpr int64_t kGemvCudaCoreRows = 4;
// Rows the tensor-core kernel takes (bf16 and fp16 only, from 2): one m16n8 tile.
inline constexpr int64_t kGemvTensorCoreRows = 8;

// The most rows of x LaunchGemv takes for a kind: kGemvCudaCoreRows for fp32, else
// kGemvTensorCoreRows.
int64_t GemvMaxRows(FloatKind kind);

// y[r, j] = act(sum_i x[r, i] * w[j, i] + bias[j]) for r < rows: products and sums in fp32, y
// rounded once to the kind; act is the identity or, with `gelu`, the tanh-approximated GELU.
// x [rows, in], w [out, in] and y [rows, out] contiguous, bias [out] or null, all of one kind;
// `in` a multiple of 16 bytes' elements and every pointer 16-byte aligned (the caller checks).
struct GemvArgs {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;
  bool gelu = false;
  void* y = nullptr;
  int64_t rows = 0, out = 0, in = 0;
  // An input LayerNorm for one row (rows = 1), when norm_weight is set: x is replaced by
  // LayerNorm(x + residual) over `in` (no residual when it is null) with norm_weight, norm_bias
  // [in] and eps, the math of layer_norm_launch.h's forward (the sum rounded to the kind, the
  // normalised x too); the sum is written to `sum` [in] when residual and sum are set. Each block
  // normalises the row itself into shared memory: one kernel where a LayerNorm and a GEMV were
  // two in sequence.
  const void* residual = nullptr;
  const void* norm_weight = nullptr;
  const void* norm_bias = nullptr;
  float eps = 0.0f;
  void* sum = nullptr;
};

// True when LaunchGemv takes an input LayerNorm for these rows: one row, its LayerNorm's weight,
// bias and values in a block's shared memory (48 KiB: 8,192 bf16 values).
bool GemvNormFits(FloatKind kind, int64_t rows, int64_t in);

// Launches the kernel for `args.rows` (1 <= rows <= GemvMaxRows(kind)) as a dependent launch
// (dependent_launch.cuh); cudaErrorInvalidValue for a row count out of range or an input
// LayerNorm that does not fit (GemvNormFits).
cudaError_t LaunchGemv(FloatKind kind, const GemvArgs& args, cudaStream_t stream);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_GEMV_LAUNCH_H_
