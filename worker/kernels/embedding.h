// The lookup of token rows in an embedding table, with a backward of mt's own: the output
// gradient's rows summed by token in one sort and two passes (embedding_kernel.cu) where
// LibTorch's embedding backward, also sort-based, runs a dozen kernels: ~0.95 ms of a GPT-2 124M
// step on an H100 (bench/RESULTS.md, 2026-12-06, issue #16).
#ifndef MT_WORKER_KERNELS_EMBEDDING_H_
#define MT_WORKER_KERNELS_EMBEDDING_H_

#include <torch/types.h>

#include <cstdint>

namespace mt::kernels {

// weight [rows, cols], tokens (int64, any shape, values in [0, rows)) -> [tokens..., cols]: what
// torch::embedding(weight, tokens) returns (no padding index, no frequency scaling), and the
// same forward; the weight's gradient by EmbeddingBackward. No gradient for tokens.
torch::Tensor Embedding(const torch::Tensor& weight, const torch::Tensor& tokens);

// The table's gradient: grad [tokens..., cols] -> [rows, cols], row r the sum of the rows of grad
// whose token is r (zero where none is), in grad's dtype: LibTorch's embedding_dense_backward.
// CUDA kernel for fp32 / bf16 / fp16 grad whose rows are whole 16-byte vectors and at most 2^31 -
// 1 tokens and rows: sums in fp32 in the order of the tokens, rounded once (deterministic);
// elsewhere torch::embedding_backward. tokens belong in [0, rows) (Embedding's forward, LibTorch's
// lookup, refuses others before any backward); the kernel sums one outside into no row and writes
// nothing outside the table. No autograd.
torch::Tensor EmbeddingBackward(const torch::Tensor& grad, const torch::Tensor& tokens,
                                int64_t rows);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_EMBEDDING_H_
