#include "worker/parallel/tp_overlap.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/version.h>

#include <exception>
#include <functional>
#include <utility>
#include <vector>

#include "worker/parallel/autograd_group.h"
#include "worker/parallel/comm_stats.h"
#include "worker/parallel/process_groups.h"

namespace mt::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The ring's own tag (the pipeline's p2p uses others on its own group).
constexpr int kRingTag = 7;

bool Active(const GroupHandle* g) { return g != nullptr && g->active(); }

// Sequence chunk t (of `chunk` positions) of a [b, s, .] tensor: a strided view.
torch::Tensor Seq(const torch::Tensor& t, int64_t index, int64_t chunk) {
  return t.narrow(1, index * chunk, chunk);
}

// a [b, m, k] (a strided view whose rows are contiguous) times m2 [k, n]: one batched GEMM
// whose batch stride is a's own, so a sequence chunk of a [b, s, k] tensor is read in place.
// Into `out` [b, m, n] (a strided view as well) when given.
torch::Tensor ChunkGemm(const torch::Tensor& a, const torch::Tensor& m2, torch::Tensor out = {}) {
  const torch::Tensor b2 = m2.expand({a.size(0), m2.size(0), m2.size(1)});
  if (!out.defined()) return at::bmm(a, b2);
  at::bmm_out(out, a, b2);
  return out;
}

// One step of the ring in flight: `send` to rank + 1, `recv` filled by rank - 1 (mod size).
class RingStep {
 public:
  RingStep() = default;
  RingStep(const GroupHandle& g, torch::Tensor send, torch::Tensor recv)
      : group_(&g), send_(std::move(send)), recv_(std::move(recv)) {
    const int next = (g.rank + 1) % g.size;
    const int prev = (g.rank + g.size - 1) % g.size;
    std::vector<at::Tensor> s{send_};
    std::vector<at::Tensor> r{recv_};
    // One NCCL group for the pair, as the pipeline's batch_isend_irecv: with two ranks the
    // send and the receive go to the same peer, and posted alone they would wait for each other.
    const bool coalesce = g.group->getBackendName() == "nccl";
    if (coalesce) g.group->startCoalescing();
    Add(g.group->send(s, next, kRingTag));
    Add(g.group->recv(r, prev, kRingTag));
    if (coalesce) {
#if TORCH_VERSION_MAJOR >= 2
      Add(g.group->endCoalescing());
#else
      g.group->endCoalescing(works_);
#endif
    }
  }

  // Waits for both halves; returns what arrived. Failures throw c10::Error naming the group.
  torch::Tensor Wait() {
    CommStats::Span span = StartComm(*group_, Collective::kRecv, recv_);
    for (auto& work : works_) {
      try {
        work->wait();
      } catch (const std::exception& e) {
        TORCH_CHECK(false, "tensor-parallel ring send/recv over ", group_->name,
                    " failed: ", e.what());
      }
    }
    span.Finish();
    works_.clear();
    send_ = torch::Tensor();
    return std::move(recv_);
  }

 private:
  void Add(c10::intrusive_ptr<c10d::Work> work) {
    if (work) works_.push_back(std::move(work));
  }

  const GroupHandle* group_ = nullptr;
  torch::Tensor send_;  // kept alive until the send completed
  torch::Tensor recv_;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

// Ring all-gather of the group's chunks: use(t, chunk t) for every t, this rank's own chunk
// first, each while the next one travels.
void RingAllGather(const GroupHandle& g, const torch::Tensor& mine,
                   const std::function<void(int64_t, const torch::Tensor&)>& use) {
  torch::Tensor current = mine.contiguous();
  for (int k = 0; k < g.size; ++k) {
    // At step k this rank holds the chunk of rank - k; rank + 1 needs it at step k + 1.
    const int64_t t = (g.rank - k + g.size) % g.size;
    RingStep step;
    if (k + 1 < g.size) step = RingStep(g, current, torch::empty_like(current));
    use(t, current);
    if (k + 1 < g.size) current = step.Wait();
  }
}

// Ring reduce-scatter: the sum over the group of partial(t) for t = this rank's chunk. At step
// k this rank computes its partial of chunk rank - k - 1 while the running sum of the chunk
// before travels, adds the sum that arrived and passes it on; the last step's chunk is its own.
// `overlap` runs once, while the first transfer is in flight.
torch::Tensor RingReduceScatter(const GroupHandle& g,
                                const std::function<torch::Tensor(int64_t)>& partial,
                                const std::function<void()>& overlap) {
  RingStep pending;
  for (int k = 0; k < g.size; ++k) {
    const int64_t t = (g.rank - k - 1 + 2 * g.size) % g.size;
    torch::Tensor sum = partial(t);
    if (k > 0) sum.add_(pending.Wait());
    if (k + 1 == g.size) return sum;
    pending = RingStep(g, sum, torch::empty_like(sum));
    if (k == 0 && overlap) overlap();
  }
  return {};  // not reached: the loop returns at its last step
}

int64_t ChunkOfSequence(const torch::Tensor& t, const GroupHandle& g) {
  TORCH_CHECK(t.dim() == 3, "tensor-parallel overlap: activations are [b, s, h]; got ", t.dim(),
              " dimensions");
  TORCH_CHECK(t.size(1) % g.size == 0, "tensor-parallel overlap: sequence length ", t.size(1),
              " is not divisible by the ", g.name, " group size ", g.size);
  return t.size(1) / g.size;
}

// Its inputs are (x, w, group) or (x, w, group, bias): LibTorch 1.13's apply() takes no
// undefined tensor.
class AllGatherLinearFunction : public torch::autograd::Function<AllGatherLinearFunction> {
 public:
  template <typename... Bias>
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const GroupHandle* g, const Bias&... bias) {
    static_assert(sizeof...(Bias) <= 1, "one bias at most");
    TORCH_CHECK(x.dim() == 3, "tensor-parallel overlap: activations are [b, s, h]");
    const int64_t b = x.size(0), c = x.size(1), h = x.size(2);
    torch::Tensor full = torch::empty({b, c * g->size, h}, x.options());
    torch::Tensor y = torch::empty({b, c * g->size, w.size(0)}, x.options());
    const torch::Tensor wt = w.t();
    RingAllGather(*g, x, [&](int64_t t, const torch::Tensor& chunk) {
      ChunkGemm(chunk, wt, Seq(y, t, c));
      Seq(full, t, c).copy_(chunk);
    });
    (y.add_(bias), ...);
    internal::SaveGroup(ctx, *g);
    ctx->saved_data["has_bias"] = sizeof...(Bias) == 1;
    ctx->save_for_backward({full, w});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const c10::intrusive_ptr<internal::GroupRef> keep = internal::SavedGroup(ctx);
    const GroupHandle& g = keep->handle;
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& full = saved[0];
    const torch::Tensor& w = saved[1];
    const torch::Tensor dy = grad_outputs[0].contiguous();
    const int64_t c = ChunkOfSequence(dy, g);
    torch::Tensor dw;
    const torch::Tensor dx = RingReduceScatter(
        g, [&](int64_t t) { return ChunkGemm(Seq(dy, t, c), w); },
        [&] {
          dw = dy.reshape({-1, dy.size(2)}).t().mm(full.reshape({-1, full.size(2)}));
        });
    if (!ctx->saved_data["has_bias"].toBool()) return {dx, dw, torch::Tensor()};
    return {dx, dw, torch::Tensor(), dy.sum(at::IntArrayRef{0, 1})};
  }
};

class LinearReduceScatterFunction : public torch::autograd::Function<LinearReduceScatterFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const GroupHandle* g) {
    const torch::Tensor xc = x.contiguous();
    const int64_t c = ChunkOfSequence(xc, *g);
    const torch::Tensor wt = w.t();
    torch::Tensor y =
        RingReduceScatter(*g, [&](int64_t t) { return ChunkGemm(Seq(xc, t, c), wt); }, {});
    internal::SaveGroup(ctx, *g);
    ctx->save_for_backward({xc, w});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const c10::intrusive_ptr<internal::GroupRef> keep = internal::SavedGroup(ctx);
    const GroupHandle& g = keep->handle;
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    const torch::Tensor dy = grad_outputs[0].contiguous();
    const int64_t b = dy.size(0), c = dy.size(1), o = dy.size(2);
    torch::Tensor full_dy = torch::empty({b, c * g.size, o}, dy.options());
    torch::Tensor dx = torch::empty({b, c * g.size, x.size(2)}, dy.options());
    RingAllGather(g, dy, [&](int64_t t, const torch::Tensor& chunk) {
      ChunkGemm(chunk, w, Seq(dx, t, c));
      Seq(full_dy, t, c).copy_(chunk);
    });
    const torch::Tensor dw = full_dy.reshape({-1, o}).t().mm(x.reshape({-1, x.size(2)}));
    return {dx, dw, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor AllGatherLinear(const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& bias, const GroupHandle* group) {
  if (!Active(group)) {
    return bias.defined() ? at::linear(x, w, bias) : at::matmul(x, w.t());
  }
  if (!bias.defined()) return AllGatherLinearFunction::apply(x, w, group);
  return AllGatherLinearFunction::apply(x, w, group, bias);
}

torch::Tensor LinearReduceScatter(const torch::Tensor& x, const torch::Tensor& w,
                                  const GroupHandle* group) {
  if (!Active(group)) return at::matmul(x, w.t());
  return LinearReduceScatterFunction::apply(x, w, group);
}

}  // namespace mt::parallel
