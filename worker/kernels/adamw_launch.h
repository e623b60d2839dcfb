// The CUDA side of adamw.h: plain pointers, no LibTorch (keeps nvcc off its headers).
//
// Both kernels walk a table of pieces on the device. A piece is a run of `numel` elements of
// the flat optimizer buffers (fp32 master weights, exp_avg, exp_avg_sq from `state_begin`, the
// 16-bit model copy from `model_begin`) whose gradient lies at `grad` (its own allocation: a
// parameter's .grad or a range of a gradient buffer; null = all zeros). The pieces are cut
// into tiles of kAdamWTileElements; `tile_begin` is the piece's first tile (the prefix sum of
// the pieces' tile counts, which the kernels search to find their piece).
#ifndef MT_WORKER_KERNELS_ADAMW_LAUNCH_H_
#define MT_WORKER_KERNELS_ADAMW_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/float_kind.h"

namespace mt::kernels {

inline constexpr int64_t kAdamWTileElements = 4096;

struct AdamWPieceDesc {
  const void* grad = nullptr;
  int64_t state_begin = 0;
  int64_t model_begin = 0;
  int64_t numel = 0;
  int64_t tile_begin = 0;
  int32_t weight_decay = 0;  // 1: decoupled weight decay applies
  int32_t counted = 1;       // the norm: 1 counted, 0 only its inf/NaN count
};

// Blocks of the sum-of-squares kernel: the length of `partial` (2 floats a block).
int GradSumOfSquaresBlocks();

// sumsq[0] = sum over the counted pieces of g^2 + 0 * (the same over the others), in fp32,
// through `partial` (2 x GradSumOfSquaresBlocks() floats). Deterministic: every block sums
// fixed tiles in a fixed order and one block adds the partial sums in a fixed order.
cudaError_t LaunchGradSumOfSquares(FloatKind grad_kind, const AdamWPieceDesc* pieces,
                                   int num_pieces, int64_t num_tiles, float* partial, float* sumsq,
                                   cudaStream_t stream);

struct AdamWArgs {
  float* master = nullptr;  // fp32 master weights, at state_begin (model_begin: master_is_model)
  bool master_is_model = false;  // an fp32 model is its own master (model is null then)
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  void* model = nullptr;                // the 16-bit model copy (model_kind), or null for none
  const float* step = nullptr;          // Adam's t after this step's increment
  const float* grad_divisor = nullptr;  // every gradient is divided by it
  const float* found_inf = nullptr;     // != 0: the kernel changes nothing
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
};

// torch.optim.AdamW(fused=True)'s update of every piece (g = grad / grad_divisor;
// p -= lr wd p where the piece decays; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)), then model = p rounded to
// model_kind, in one pass over the buffers.
cudaError_t LaunchAdamW(FloatKind grad_kind, FloatKind model_kind, const AdamWPieceDesc* pieces,
                        int num_pieces, int64_t num_tiles, const AdamWArgs& args,
                        cudaStream_t stream);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_ADAMW_LAUNCH_H_
