// Fused softmax cross entropy for the language-model head (llm.c's fused classifier): one CUDA
// kernel reads each row of logits (once where the row fits in shared memory, as GPT-2's 50,304
// bf16 logits do; else twice: max/sum, then softmax) and writes the loss of the row and the
// gradient of the mean loss, in place, into the logits' own memory. The usual chain
// (cast to fp32, log_softmax, nll; in backward log_softmax_backward, cast back) instead makes
// two fp32 copies of the logits — 13 GB for GPT-2 124M at micro-batch 32 — and reads and writes
// them several times.
//
// Same math as Megatron's / PyTorch's: loss_i = logsumexp(x_i) - x_i[t_i] in fp32 over all V
// entries (padded vocabulary entries included, as Megatron does); mean over the N rows. The
// gradient d mean / d x = (softmax(x) - onehot(t)) / N is written in the logits' dtype (bf16
// or fp32), which is the precision the eager path hands back to the output layer anyway. fp16
// logits take the eager chain: there the loss scale multiplies the gradient before it is
// rounded, which a gradient written in the forward pass cannot have.
// A target outside [0, V) makes its row's loss NaN (no host check: that would synchronise).
//
// No LibTorch in this header beyond the tensor type.
#ifndef MT_WORKER_KERNELS_CROSS_ENTROPY_H_
#define MT_WORKER_KERNELS_CROSS_ENTROPY_H_

#include <torch/types.h>

namespace mt::kernels {

// True when FusedCrossEntropy runs the fused kernel for these logits (a CUDA build and CUDA
// logits in fp32 or bf16); false means it falls back to the eager chain (CPU, fp64, fp16).
bool FusedCrossEntropyAvailable(const torch::Tensor& logits);

// Mean cross entropy of logits [N, V] against targets [N] (int64), as an fp32 scalar with
// autograd. With the fused kernel the logits' memory is REUSED for their gradient: the caller
// must not read `logits` after this call (the language-model head's matmul output is used by
// nothing else). Elsewhere: torch's cross_entropy on logits upcast to fp32 (fp64 stays fp64).
torch::Tensor FusedCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets);

// The language-model head and its loss in one autograd node: mean cross entropy of
// logits = hidden weight^T (hidden [N, h], weight [V, h]) against targets [N], as an fp32
// scalar with autograd into hidden and weight. With the fused kernel the logits are never
// kept or read again: the kernel turns them into d loss / d logits in place, and backward
// scales the two small products (d hidden = dlogits weight, d weight = dlogits^T hidden) by
// the incoming gradient instead of the [N, V] gradient itself (FusedCrossEntropy's backward
// multiplies all N x V entries: 2 ms a step at GPT-2 124M, micro-batch 32, on an H200), and
// writes d weight contiguous [V, h]. Elsewhere (CPU, fp64): linear + cross entropy in fp32, as
// FusedCrossEntropy falls back.
torch::Tensor FusedLinearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                      const torch::Tensor& targets);

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_CROSS_ENTROPY_H_
