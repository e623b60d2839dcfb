// The CUDA side of embedding.h: plain pointers, no LibTorch (keeps nvcc off its headers).
#ifndef MT_WORKER_KERNELS_EMBEDDING_LAUNCH_H_
#define MT_WORKER_KERNELS_EMBEDDING_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "worker/kernels/float_kind.h"

namespace mt::kernels {

// Sorted entries a chunk of the backward's first pass sums (embedding_kernel.cu).
inline constexpr int kEmbeddingRowsPerChunk = 16;

// Bytes of device scratch LaunchEmbeddingBackward needs for `n` lookups of `cols` columns into
// a table of `rows` rows (the sort's keys, positions and temporary storage, the chunks' partial
// sums); 0 where the sizes are out of range (n or rows not in [1, 2^31 - 1], cols < 1).
size_t EmbeddingBackwardScratchBytes(int64_t n, int64_t rows, int64_t cols);

// grad_weight [rows, cols] = for each row r, the sum over i with tokens[i] == r of
// grad_out[i] (grad_out [n, cols], contiguous), rows no token names zero; what LibTorch's
// embedding_dense_backward computes without a padding index or frequency scaling. Sums in
// fp32, in the order of i, rounded once to `kind` (deterministic). tokens are int64; one outside
// [0, rows) is summed into no row (nothing is written outside grad_weight). grad_out and
// grad_weight 16-byte aligned, cols a multiple of 16 / sizeof(element); `scratch` holds
// EmbeddingBackwardScratchBytes, 16-byte aligned. No host synchronisation (a CUDA graph can capture
// it).
cudaError_t LaunchEmbeddingBackward(FloatKind kind, const void* grad_out, const int64_t* tokens,
                                    int64_t n, int64_t rows, int64_t cols, void* grad_weight,
                                    void* scratch, size_t scratch_bytes, cudaStream_t stream);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_EMBEDDING_LAUNCH_H_
