// Sequence-parallel linear layers whose tensor-parallel communication is overlapped with their
// GEMMs (Megatron's --tp-comm-overlap; parallel.tp_comm_overlap). Without it a sequence-
// parallel column-parallel layer all-gathers its input and then multiplies, and a row-parallel
// one multiplies and then reduce-scatters its output: the collective and the GEMM take turns.
// Here both are split into the TP group's sequence chunks and run as a ring of send/receive
// pairs, each chunk's GEMM running while the next chunk travels:
//
//   AllGatherLinear (column parallel; x [b, s/tp, h] -> y [b, s, o/tp]):
//     forward   ring all-gather of x's chunks; chunk t's GEMM y_t = x_t w^T + bias as soon as
//               x_t is here (this rank's own chunk first, before anything arrived)
//     backward  ring reduce-scatter of dx = dy w: chunk t's partial product is computed while
//               the running sum of the previous chunk travels; the weight gradient's GEMM runs
//               while the first transfer is in flight
//   LinearReduceScatter (row parallel; x [b, s, i/tp] -> y [b, s/tp, o], no bias):
//     forward   ring reduce-scatter of x w^T, chunk by chunk as above
//     backward  ring all-gather of dy's chunks; chunk t's dx_t = dy_t w as soon as dy_t is here
//
// Each is the same sum as the unfused mappings (tensor_parallel.h: GatherFromSequence...
// then a linear, a linear then ReduceScatterToSequence...), summed in ring order: equal up to
// rounding (tp_overlap_test.cc compares them at 1e-12 in fp64). Activations are [b, s, h]
// (batch first), chunks in group order (rank r holds the r-th), s divisible by the group size.
//
// The ring: rank r sends to r + 1 and receives from r - 1 (mod tp); a send and its receive
// are posted together (one NCCL group, like the pipeline's batch_isend_irecv), then waited
// for after the GEMM. The chunk GEMMs read and write strided views of the [b, s, .] tensors
// (batched GEMMs whose batch stride is the sequence's), so no chunk is copied for a GEMM.
// Communication is timed into the group's CommStats as send/recv (the time waited, not the
// time in flight behind a GEMM).
//
// A null group or one of size 1: a plain linear. Collective failures throw c10::Error (the
// trainer turns them into a Status at its edge, as for tensor_parallel.h). No c10d here.
#ifndef MT_WORKER_PARALLEL_TP_OVERLAP_H_
#define MT_WORKER_PARALLEL_TP_OVERLAP_H_

#include <torch/types.h>

namespace mt::parallel {

struct GroupHandle;  // process_groups.h

// y = AllGather_seq(x) w^T + bias; `bias` may be undefined. Differentiable in x, w and bias.
torch::Tensor AllGatherLinear(const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& bias, const GroupHandle* group);

// y = ReduceScatter_seq(x w^T). Differentiable in x and w (a row-parallel bias is added after,
// by the caller, on the reduced chunk).
torch::Tensor LinearReduceScatter(const torch::Tensor& x, const torch::Tensor& w,
                                  const GroupHandle* group);

}  // namespace mt::parallel

#endif  // MT_WORKER_PARALLEL_TP_OVERLAP_H_
