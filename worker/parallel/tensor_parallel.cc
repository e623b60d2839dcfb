#include "worker/parallel/tensor_parallel.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>

#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/rng.h"
#include "worker/model/generator_state.h"
#include "worker/parallel/autograd_group.h"
#include "worker/parallel/process_groups.h"

namespace mt::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool Active(const GroupHandle* g) { return g != nullptr && g->active(); }

bool IsNccl(const GroupHandle& g) { return g.group->getBackendName() == "nccl"; }

// Waits for one collective; failures become c10::Error naming the collective and the group.
void WaitFor(const c10::intrusive_ptr<c10d::Work>& work, const GroupHandle& g, const char* what) {
  try {
    work->wait();
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, what, " over ", g.name, " failed: ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, what, " over ", g.name, " failed: ", e.what());
  }
}

int64_t ChunkSize(const torch::Tensor& t, int64_t dim, const GroupHandle& g) {
  TORCH_CHECK(t.size(dim) % g.size == 0, "tensor-parallel split: dimension ", dim, " of size ",
              t.size(dim), " is not divisible by the ", g.name, " group size ", g.size);
  return t.size(dim) / g.size;
}

// One class per mapping: Forward and Backward name the collective of each direction.
enum class Op {
  kIdentity,
  kAllReduce,
  kSplitLast,
  kGatherLast,
  kSplitSeq,
  kGatherSeq,
  kReduceScatterSeq,
};

torch::Tensor Apply(Op op, const torch::Tensor& x, const GroupHandle& g) {
  switch (op) {
    case Op::kIdentity:
      return x;
    case Op::kAllReduce: {
      torch::Tensor out = x.clone(at::MemoryFormat::Contiguous);
      AllReduce(out, &g);
      return out;
    }
    case Op::kSplitLast:
      return ChunkOf(x, x.dim() - 1, &g);
    case Op::kGatherLast:
      return AllGather(x, x.dim() - 1, &g);
    case Op::kSplitSeq:
      return ChunkOf(x, 1, &g);
    case Op::kGatherSeq:
      return AllGather(x, 1, &g);
    case Op::kReduceScatterSeq:
      return ReduceScatter(x, 1, &g);
  }
  return x;
}

template <Op kForward, Op kBackward>
class Mapping : public torch::autograd::Function<Mapping<kForward, kBackward>> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const GroupHandle* g) {
    internal::SaveGroup(ctx, *g);
    return Apply(kForward, x, *g);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const c10::intrusive_ptr<internal::GroupRef> keep = internal::SavedGroup(ctx);
    const GroupHandle& g = keep->handle;
    return {Apply(kBackward, grad_outputs[0], g), torch::Tensor()};
  }
};

template <Op kForward, Op kBackward>
torch::Tensor Map(const torch::Tensor& x, const GroupHandle* g) {
  if (!Active(g)) return x;
  return Mapping<kForward, kBackward>::apply(x, g);
}

class VocabParallelCrossEntropyFunction
    : public torch::autograd::Function<VocabParallelCrossEntropyFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& targets, int64_t vocab_start,
                               const GroupHandle* g) {
    const int64_t shard = logits.size(-1);
    // Subtract the global max for a stable exp (the result does not depend on it).
    torch::Tensor max = std::get<0>(logits.max(-1));
    AllReduce(max, g, ReduceOp::kMax);
    torch::Tensor shifted = logits - max.unsqueeze(-1);
    const torch::Tensor in_range =
        targets.ge(vocab_start).logical_and(targets.lt(vocab_start + shard));
    const torch::Tensor local = (targets - vocab_start).masked_fill(in_range.logical_not(), 0);
    torch::Tensor predicted =
        shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(in_range.logical_not(), 0);
    torch::Tensor exp = shifted.exp_();
    // The target logit (held by one rank) and the partial sums of exp in one all-reduce.
    torch::Tensor both = torch::stack({predicted, exp.sum(-1)});
    AllReduce(both, g, ReduceOp::kSum);
    predicted = both[0];
    const torch::Tensor sum_exp = both[1];
    torch::Tensor loss = sum_exp.log() - predicted;
    exp.div_(sum_exp.unsqueeze(-1));  // now this rank's columns of the softmax
    ctx->save_for_backward({exp, local, in_range});
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    // d loss / d logits = softmax - one_hot(target), in place on the saved softmax as Megatron
    // does (the graph is not run twice: the model never retains it).
    torch::Tensor grad = saved[0];
    const torch::Tensor& local = saved[1];
    const torch::Tensor& in_range = saved[2];
    grad.scatter_add_(-1, local.unsqueeze(-1), in_range.to(grad.scalar_type()).neg().unsqueeze(-1));
    grad.mul_(grad_outputs[0].unsqueeze(-1));
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void AllReduce(torch::Tensor& t, const GroupHandle* g, ReduceOp op) {
  if (!Active(g)) return;
  torch::Tensor buf = t.is_contiguous() ? t : t.contiguous();
  std::vector<torch::Tensor> v = {buf};
  c10d::AllreduceOptions opts;
  opts.reduceOp = op == ReduceOp::kMax ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
  CommStats::Span span = StartComm(*g, Collective::kAllReduce, buf);
  WaitFor(g->group->allreduce(v, opts), *g, "all-reduce");
  span.Finish();
  if (!buf.is_same(t)) t.copy_(buf);
}

void Broadcast(torch::Tensor& t, int root, const GroupHandle* g) {
  if (!Active(g)) return;
  torch::Tensor buf = t.is_contiguous() ? t : t.contiguous();
  std::vector<torch::Tensor> v = {buf};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  CommStats::Span span = StartComm(*g, Collective::kBroadcast, buf);
  WaitFor(g->group->broadcast(v, opts), *g, "broadcast");
  span.Finish();
  if (!buf.is_same(t)) t.copy_(buf);
}

torch::Tensor AllGather(const torch::Tensor& t, int64_t dim, const GroupHandle* g) {
  if (!Active(g)) return t;
  torch::Tensor in = t.contiguous();
  std::vector<torch::Tensor> parts;
  if (IsNccl(*g)) {
    // One flat buffer (NCCL all-gathers contiguous memory), then the chunks along `dim`.
    torch::Tensor out = torch::empty({g->size * in.numel()}, in.options());
    torch::Tensor flat = in.view({-1});
    CommStats::Span span = StartComm(*g, Collective::kAllGather, in);
    WaitFor(g->group->_allgather_base(out, flat), *g, "all-gather");
    span.Finish();
    std::vector<int64_t> shape = {g->size};
    for (int64_t s : in.sizes()) shape.push_back(s);
    if (dim == 0) {
      shape.erase(shape.begin());
      shape[0] *= g->size;
      return out.view(shape);
    }
    parts = out.view(shape).unbind(0);
  } else {
    std::vector<std::vector<torch::Tensor>> outs(1);
    for (int r = 0; r < g->size; ++r) outs[0].push_back(torch::empty_like(in));
    std::vector<torch::Tensor> ins = {in};
    CommStats::Span span = StartComm(*g, Collective::kAllGather, in);
    WaitFor(g->group->allgather(outs, ins), *g, "all-gather");
    span.Finish();
    parts = std::move(outs[0]);
  }
  return torch::cat(parts, dim);
}

torch::Tensor ReduceScatter(const torch::Tensor& t, int64_t dim, const GroupHandle* g) {
  if (!Active(g)) return t;
  const int64_t chunk = ChunkSize(t, dim, *g);
  if (IsNccl(*g)) {
    // The chunks along `dim` laid out one after the other, as _reduce_scatter_base wants.
    torch::Tensor in = dim == 0 ? t.contiguous() : torch::stack(t.chunk(g->size, dim), 0);
    torch::Tensor flat = in.view({-1});
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    shape[dim] = chunk;
    torch::Tensor out = torch::empty(shape, t.options());
    CommStats::Span span = StartComm(*g, Collective::kReduceScatter, out);
    WaitFor(g->group->_reduce_scatter_base(out, flat), *g, "reduce-scatter");
    span.Finish();
    return out;
  }
  // Gloo (LibTorch 1.13) has no reduce-scatter: all-reduce, keep this rank's slice. Exact.
  torch::Tensor full = t.clone(at::MemoryFormat::Contiguous);
  AllReduce(full, g);
  return full.narrow(dim, g->rank * chunk, chunk).contiguous();
}

torch::Tensor ChunkOf(const torch::Tensor& t, int64_t dim, const GroupHandle* g) {
  if (!Active(g)) return t;
  const int64_t chunk = ChunkSize(t, dim, *g);
  return t.narrow(dim, g->rank * chunk, chunk).contiguous();
}

absl::Status AllReduceCoalesced(const std::vector<torch::Tensor>& tensors,
                                const GroupHandle* group) {
  if (!Active(group) || tensors.empty()) return absl::OkStatus();
  try {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> flat;
    flat.reserve(tensors.size());
    for (const torch::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
    torch::Tensor buffer = torch::cat(flat);
    AllReduce(buffer, group);
    int64_t offset = 0;
    for (const torch::Tensor& t : tensors) {
      t.copy_(buffer.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("all-reducing ", tensors.size(), " tensors over ",
                                               group->name, ": ", e.what()));
  }
  return absl::OkStatus();
}

torch::Tensor CopyToTensorParallelRegion(const torch::Tensor& x, const GroupHandle* group) {
  return Map<Op::kIdentity, Op::kAllReduce>(x, group);
}
torch::Tensor ReduceFromTensorParallelRegion(const torch::Tensor& x, const GroupHandle* group) {
  return Map<Op::kAllReduce, Op::kIdentity>(x, group);
}
torch::Tensor ScatterToTensorParallelRegion(const torch::Tensor& x, const GroupHandle* group) {
  return Map<Op::kSplitLast, Op::kGatherLast>(x, group);
}
torch::Tensor GatherFromTensorParallelRegion(const torch::Tensor& x, const GroupHandle* group) {
  return Map<Op::kGatherLast, Op::kSplitLast>(x, group);
}
torch::Tensor ScatterToSequenceParallelRegion(const torch::Tensor& x, const GroupHandle* group) {
  return Map<Op::kSplitSeq, Op::kGatherSeq>(x, group);
}
torch::Tensor GatherFromSequenceParallelRegion(const torch::Tensor& x, const GroupHandle* group) {
  return Map<Op::kGatherSeq, Op::kReduceScatterSeq>(x, group);
}
torch::Tensor ReduceScatterToSequenceParallelRegion(const torch::Tensor& x,
                                                    const GroupHandle* group) {
  return Map<Op::kReduceScatterSeq, Op::kGatherSeq>(x, group);
}

std::pair<int64_t, int64_t> VocabRange(int64_t padded_vocab_size, int rank, int size) {
  const int64_t per_rank = padded_vocab_size / size;
  return {rank * per_rank, (rank + 1) * per_rank};
}

torch::Tensor VocabParallelCrossEntropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                        int64_t vocab_start, const GroupHandle* group) {
  const torch::Tensor x =
      logits.scalar_type() == torch::kDouble ? logits : logits.to(torch::kFloat);
  return VocabParallelCrossEntropyFunction::apply(x, targets, vocab_start, group);
}

torch::Tensor WithTensorParallelRng(c10::Device device, int tp_rank,
                                    const std::function<torch::Tensor()>& f) {
  torch::Tensor out;
  {
    const model::GeneratorStateGuard caller(device);  // put back after f, also if it throws
    const at::Tensor bytes = caller.saved().contiguous();
    const uint64_t h = Fnv1a(bytes.data_ptr(), bytes.numel() * bytes.element_size());
    model::SeedGenerator(device, SplitMix64(h ^ SplitMix64(static_cast<uint64_t>(tp_rank) + 1)));
    out = f();
  }
  torch::empty({1}, torch::TensorOptions().device(device)).uniform_();
  return out;
}

}  // namespace mt::parallel
