// The CUDA side of cross_entropy.h: plain pointers, no LibTorch (keeps nvcc off its headers).
#ifndef MT_WORKER_KERNELS_CROSS_ENTROPY_LAUNCH_H_
#define MT_WORKER_KERNELS_CROSS_ENTROPY_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/float_kind.h"

namespace mt::kernels {

// For each of `rows` rows of `vocab` logits (row stride = vocab, in place): losses[r] =
// logsumexp - logits[r][targets[r]] (fp32), then logits[r][j] = (softmax_j - [j == t]) *
// grad_scale. Returns the launch error (cudaSuccess when queued).
cudaError_t LaunchFusedCrossEntropy(FloatKind kind, void* logits, const int64_t* targets,
                                    float* losses, int64_t rows, int64_t vocab, float grad_scale,
                                    cudaStream_t stream);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_CROSS_ENTROPY_LAUNCH_H_
