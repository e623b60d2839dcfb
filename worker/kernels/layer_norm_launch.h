// The CUDA side of layer_norm.h: plain pointers, no LibTorch (keeps nvcc off its headers).
// All tensors are contiguous, rows x hidden, of one FloatKind (x, residual, sums, y, dy, dx,
// weight, bias and their gradients); mean and rstd are fp32 [rows].
#ifndef MT_WORKER_KERNELS_LAYER_NORM_LAUNCH_H_
#define MT_WORKER_KERNELS_LAYER_NORM_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/dropout_rng.h"
#include "worker/kernels/float_kind.h"

namespace mt::kernels {

// sum = x + residual (when residual is non-null; else sum is x and `sum` may be null), plus
// residual_bias [hidden] on every row where both are non-null (a linear layer's bias left out of
// its GEMM: model::GptConfig::fold_linear_bias), added in fp32 and rounded once; then
// y = (sum - mean) * rstd * weight + bias with mean / rstd over each row of the sum as stored
// (rounded to the dtype), in fp32. Writes mean and rstd. With a residual and drop.p > 0, the
// sum is x + dropout(residual (+ residual_bias)) (Megatron's bias-dropout-add: the residual is
// the branch, a layer's output; the masks as dropout_rng.h draws them), in fp32, rounded once.
cudaError_t LaunchLayerNormForward(FloatKind kind, const void* x, const void* residual, void* sum,
                                   const void* weight, const void* bias, void* y, float* mean,
                                   float* rstd, int64_t rows, int64_t hidden, float eps,
                                   cudaStream_t stream, const void* residual_bias = nullptr,
                                   const DropoutArgs& drop = {});

// The most blocks a backward kernel runs with for `rows` (the rows of `partial` it may need).
int LayerNormBackwardBlocks(int64_t rows);

// Which kernel LaunchLayerNormBackward runs. Rows of 32 W 16-byte packs (W one of 1, 2, 3, 4, 6,
// 8: hidden 256 W in 16 bits, 768, 1,024 and 2,048 among them; 128 W in fp32) take a kernel of W
// warps a row with the next rows' loads in flight: kStaged (three rows ahead, copied into shared
// memory by the copy engine) or kPipelined (one row ahead, in registers); they add in the same
// order, bit for bit the same results. Other aligned widths take the register kernel (a row held
// by 1 to 8 warps, 2 packs a thread), the rest the streaming kernel. kAuto: kStaged at those
// widths (1.03-1.11x kPipelined on an H100, bench/RESULTS.md 2026-12-07); kRegister: the register
// kernel there too (layer_norm_bench compares them). The same sums every way, in another order
// for the register kernel.
enum class LayerNormBackwardPath { kAuto, kStaged, kPipelined, kRegister };

// dx = d LayerNorm / d input (dy, the saved input `x` = the sum, mean, rstd, weight) plus
// `dsum` when non-null (the gradient that reaches the sum directly: the residual stream).
// dweight / dbeta, and where `dresidual_bias` is non-null the residual bias's gradient (the sums
// of dx's columns as written): reduced over rows through `partial` (fp32, LayerNormBackwardSums
// x LayerNormBackwardBlocks(rows) x hidden), then written in the dtype. With drop.p > 0 and
// `dbranch` non-null (the forward's dropout, the same DropoutArgs), dbranch = dropout's backward
// of dx (the forward's masks drawn again, times 1 / (1 - p), rounded), the gradient of the
// forward's residual, and the residual bias's gradient sums dbranch's columns instead of dx's.
cudaError_t LaunchLayerNormBackward(FloatKind kind, const void* dy, const void* x,
                                    const float* mean, const float* rstd, const void* weight,
                                    const void* dsum, void* dx, void* dweight, void* dbias,
                                    float* partial, int64_t rows, int64_t hidden,
                                    cudaStream_t stream, void* dresidual_bias = nullptr,
                                    const DropoutArgs& drop = {}, void* dbranch = nullptr,
                                    LayerNormBackwardPath path = LayerNormBackwardPath::kAuto);

// The column sums the backward reduces through `partial`: 2 (d weight, d bias), 3 with the
// residual bias's gradient.
constexpr int LayerNormBackwardSums(bool residual_bias) { return residual_bias ? 3 : 2; }

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_LAYER_NORM_LAUNCH_H_
