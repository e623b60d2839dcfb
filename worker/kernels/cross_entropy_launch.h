// The CUDA side of cross_entropy.h: plain pointers, no LibTorch (keeps nvcc off its headers).
#ifndef MT_WORKER_KERNELS_CROSS_ENTROPY_LAUNCH_H_
#define MT_WORKER_KERNELS_CROSS_ENTROPY_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "worker/kernels/float_kind.h"

namespace mt::kernels {

// The kernel for rows of whole 16-byte vectors (16-byte aligned): kAuto takes the staged one
// (the row copied into shared memory, read from memory once) where the row leaves room for two
// blocks an SM, else the two-pass one (the row read twice); kTwoPass and kStaged force one
// (tests and cross_entropy_bench compare them; kStaged fails with
// cudaErrorInvalidConfiguration where the row does not fit a block's shared memory). Other rows
// take the scalar kernel whatever the path.
enum class CrossEntropyPath { kAuto, kTwoPass, kStaged };

// For each of `rows` rows of `vocab` logits (row stride = vocab, in place): losses[r] =
// logsumexp - logits[r][targets[r]] (fp32), then logits[r][j] = (softmax_j - [j == t]) *
// grad_scale. Returns the launch error (cudaSuccess when queued).
cudaError_t LaunchFusedCrossEntropy(FloatKind kind, void* logits, const int64_t* targets,
                                    float* losses, int64_t rows, int64_t vocab, float grad_scale,
                                    cudaStream_t stream,
                                    CrossEntropyPath path = CrossEntropyPath::kAuto);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_CROSS_ENTROPY_LAUNCH_H_
