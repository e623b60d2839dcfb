// Megatron's tensor-parallel communication (megatron/core/tensor_parallel/mappings.py and
// cross_entropy.py) for LibTorch, over the c10d group of a GroupHandle (process_groups.h):
// Gloo on CPU, NCCL on GPU, never a home-made collective.
//
// The mappings are autograd functions: each is one collective in forward and its adjoint in
// backward, so a model written with them differentiates correctly across the group.
//
//   mapping                            forward                     backward
//   CopyToTensorParallelRegion         identity                    all-reduce
//   ReduceFromTensorParallelRegion     all-reduce                  identity
//   ScatterToTensorParallelRegion      keep this rank's last-dim   all-gather along the last dim
//                                      chunk
//   GatherFromTensorParallelRegion     all-gather along last dim   keep this rank's chunk
//   ScatterToSequenceParallelRegion    keep this rank's seq chunk  all-gather along the sequence
//   GatherFromSequenceParallelRegion   all-gather along sequence   reduce-scatter along it
//   ReduceScatterToSequence...Region   reduce-scatter along seq    all-gather along it
//
// Activations are [b, s, h] (batch first): the sequence dimension is 1. Chunks are in group
// order (rank r holds the r-th chunk) and must be equal (the dimension divisible by the group
// size). A null group or one of size 1 makes every mapping the identity (no c10d call).
//
// Collective failures (a peer gone, a timeout) throw c10::Error; the trainer turns that into
// a Status at its edge (DESIGN.md §8.1). The group must outlive the autograd graphs built with
// it. No c10d in this header.
//
// Thread-compatible: one training thread uses the group; mappings of concurrent threads on
// distinct groups are independent.
#ifndef MT_WORKER_PARALLEL_TENSOR_PARALLEL_H_
#define MT_WORKER_PARALLEL_TENSOR_PARALLEL_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace mt::parallel {

struct GroupHandle;  // process_groups.h

// ---- autograd mappings (null or size-1 group: identity) ----
torch::Tensor CopyToTensorParallelRegion(const torch::Tensor& x, const GroupHandle* group);
torch::Tensor ReduceFromTensorParallelRegion(const torch::Tensor& x, const GroupHandle* group);
torch::Tensor ScatterToTensorParallelRegion(const torch::Tensor& x, const GroupHandle* group);
torch::Tensor GatherFromTensorParallelRegion(const torch::Tensor& x, const GroupHandle* group);
// Sequence parallelism (dim 1 of [b, s, h]).
torch::Tensor ScatterToSequenceParallelRegion(const torch::Tensor& x, const GroupHandle* group);
torch::Tensor GatherFromSequenceParallelRegion(const torch::Tensor& x, const GroupHandle* group);
torch::Tensor ReduceScatterToSequenceParallelRegion(const torch::Tensor& x,
                                                    const GroupHandle* group);

// ---- plain collectives (no autograd), what the mappings are made of ----
enum class ReduceOp { kSum, kMax };
// In place over the group.
void AllReduce(torch::Tensor& t, const GroupHandle* group, ReduceOp op = ReduceOp::kSum);
// In place: every rank's `t` becomes the one of the rank with index `root` in the group (the
// same shape and dtype on every rank).
void Broadcast(torch::Tensor& t, int root, const GroupHandle* group);
// The group's tensors concatenated along `dim` in group order.
torch::Tensor AllGather(const torch::Tensor& t, int64_t dim, const GroupHandle* group);
// The sum over the group, this rank's chunk of it along `dim`. NCCL: _reduce_scatter_base.
// Gloo has no reduce-scatter (LibTorch 1.13): an all-reduce, then this rank's slice, which is
// exactly the same sum (Gloo's all-reduce hands every rank identical values).
torch::Tensor ReduceScatter(const torch::Tensor& t, int64_t dim, const GroupHandle* group);
// This rank's chunk of `t` along `dim` (no communication).
torch::Tensor ChunkOf(const torch::Tensor& t, int64_t dim, const GroupHandle* group);

// All-reduces (sums) the tensors over the group in one collective (flattened into one
// buffer of their common dtype and copied back). For gradients of replicated parameters that
// each TP rank computed only in part (sequence parallelism: Megatron's
// allreduce_layernorm_grads). kUnavailable when the collective fails.
absl::Status AllReduceCoalesced(const std::vector<torch::Tensor>& tensors,
                                const GroupHandle* group);

// ---- vocabulary parallelism ----
// [first, last) of the padded vocabulary that tensor-parallel rank `rank` of `size` holds.
std::pair<int64_t, int64_t> VocabRange(int64_t padded_vocab_size, int rank, int size);

// Megatron's _VocabParallelCrossEntropy: per-token loss -log softmax(logits)[target] where
// `logits` [..., V/tp] is this rank's vocabulary shard (columns [vocab_start, vocab_start +
// V/tp)) and `targets` [...] holds global token ids. No rank ever forms the full logits: the
// max, the target logit and the sum of exponentials are all-reduced. Computed in fp32 (fp64
// for fp64 logits); returns [...] in that dtype; backward (softmax - one-hot) is exact.
torch::Tensor VocabParallelCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                        int64_t vocab_start, const GroupHandle* group);

// ---- the model-parallel RNG ----
// Runs f with the default generator of `device` reseeded from (its current state, tp_rank),
// then puts the state back and advances it by one draw, for dropout on activations that are
// sharded over the TP group (attention heads; everything under sequence parallelism):
// - each TP rank draws its own masks;
// - the default stream moves the same way on every rank, so dropout on replicated
//   activations (drawn from the default generator itself) stays identical across the group;
// - a rerun from the same state (recomputation restores it) draws the same masks.
// Megatron keeps a separate CUDA RNG tracker for the same purpose. The generator is shared by
// the process: concurrent users of it (ranks as threads) get undefined masks.
torch::Tensor WithTensorParallelRng(c10::Device device, int tp_rank,
                                    const std::function<torch::Tensor()>& f);

}  // namespace mt::parallel

#endif  // MT_WORKER_PARALLEL_TENSOR_PARALLEL_H_
