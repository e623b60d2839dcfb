#include "worker/kernels/fused_mlp.h"

#include <torch/torch.h>

#include "worker/kernels/column_sum.h"
#include "worker/kernels/tuned_mm.h"

#if MT_KERNELS_WITH_CUDA
#include "worker/kernels/gemm_lt_launch.h"
#include "worker/kernels/kind_of.h"
#include "worker/kernels/mlp_gelu_choice.h"
#endif

namespace mt::kernels {
namespace {

// h w2^T + b2, or h w2^T where b2 is undefined.
torch::Tensor Fc2(const torch::Tensor& h, const torch::Tensor& w2, const torch::Tensor& b2) {
  return b2.defined() ? torch::addmm(b2, h, w2.t()) : torch::mm(h, w2.t());
}

torch::Tensor EagerMlp(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                       const torch::Tensor& w2, const torch::Tensor& b2) {
  return Fc2(torch::gelu(torch::addmm(b1, x, w1.t()), "tanh"), w2, b2);
}

#if MT_KERNELS_WITH_CUDA
// One LtMatmul (tuned, tuned_mm.h) on the current stream of `like`'s device, in `like`'s dtype.
// False when cuBLASLt has no algorithm for it and a fallback is allowed (nothing was queued).
bool RunLt(const LtMatmulArgs& args, const torch::Tensor& like, bool allow_fallback,
           const char* what) {
  const int status = TunedLtMatmul(args, like);
  if (status == 0) return true;
  TORCH_CHECK(status == kLtNoAlgorithm && allow_fallback, "FusedMlp ", what,
              ": cuBLASLt: ", LtStatusName(status));
  return false;
}

// fc1's GEMM, out = x w1^T + b1 [N, F] (the bias epilogue; callers change it). All contiguous.
LtMatmulArgs Fc1Args(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                     const torch::Tensor& out) {
  LtMatmulArgs g;
  g.transpose_a = true;  // w1 [F, K] row-major is K x F column-major: op(A) = F x K
  g.m = w1.size(0);
  g.n = x.size(0);
  g.k = x.size(1);
  g.a = w1.data_ptr();
  g.lda = g.k;
  g.b = x.data_ptr();  // x [N, K] row-major: K x N column-major
  g.ldb = g.k;
  g.d = out.data_ptr();  // F x N column-major: out [N, F] row-major
  g.ldd = g.m;
  g.bias = b1.data_ptr();
  g.epilogue = LtEpilogue::kBias;
  return g;
}

// h = gelu(x w1^T + b1) [N, F] by the fc1 GEMM's epilogue; with `pre` defined it also gets the
// pre-activation (backward's aux). All contiguous.
bool Fc1Gelu(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
             const torch::Tensor& h, const torch::Tensor& pre, bool allow_fallback) {
  LtMatmulArgs g = Fc1Args(x, w1, b1, h);
  g.epilogue = pre.defined() ? LtEpilogue::kGeluAuxBias : LtEpilogue::kGeluBias;
  if (pre.defined()) {
    g.aux = pre.data_ptr();
    g.ldaux = g.m;
  }
  return RunLt(g, x, allow_fallback, "fc1 forward");
}

// pre = x w1^T + b1 by the fc1 GEMM's bias epilogue, then h = gelu(pre) by LibTorch's GELU
// kernel (MlpGelu::kKernel). All contiguous.
bool Fc1BiasThenGelu(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                     const torch::Tensor& h, const torch::Tensor& pre, bool allow_fallback) {
  if (!RunLt(Fc1Args(x, w1, b1, pre), x, allow_fallback, "fc1 forward")) return false;
  torch::Tensor out = h;
  at::gelu_out(out, pre, "tanh");
  return true;
}

// Training's fc1 forward, h and pre, by the path `gelu` names (kAuto: mlp_gelu_choice.h's).
bool Fc1Forward(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                const torch::Tensor& h, const torch::Tensor& pre, MlpGelu gelu,
                bool allow_fallback) {
  if (gelu == MlpGelu::kAuto) {
    gelu = GeluKernelFaster(
               x, w1.size(0), [&] { return Fc1Gelu(x, w1, b1, h, pre, allow_fallback); },
               [&] { return Fc1BiasThenGelu(x, w1, b1, h, pre, allow_fallback); })
               ? MlpGelu::kKernel
               : MlpGelu::kEpilogue;
  }
  return gelu == MlpGelu::kKernel ? Fc1BiasThenGelu(x, w1, b1, h, pre, allow_fallback)
                                  : Fc1Gelu(x, w1, b1, h, pre, allow_fallback);
}

// dpre = (dy w2) * gelu'(pre) [N, F] by the GEMM that computes fc2's input gradient, and with
// `db1` defined fc1's bias gradient (dpre summed over the N rows). All contiguous.
bool DGelu(const torch::Tensor& dy, const torch::Tensor& w2, const torch::Tensor& pre,
           const torch::Tensor& dpre, const torch::Tensor& db1, bool allow_fallback) {
  LtMatmulArgs g;
  g.m = w2.size(1);  // F: w2 [H, F] row-major is F x H column-major, op(A) as stored
  g.n = dy.size(0);
  g.k = w2.size(0);
  g.a = w2.data_ptr();
  g.lda = g.m;
  g.b = dy.data_ptr();  // dy [N, H] row-major: H x N column-major
  g.ldb = g.k;
  g.d = dpre.data_ptr();
  g.ldd = g.m;
  g.aux = pre.data_ptr();
  g.ldaux = g.m;
  g.epilogue = db1.defined() ? LtEpilogue::kDGeluBGrad : LtEpilogue::kDGelu;
  if (db1.defined()) g.bias_grad = db1.data_ptr();
  return RunLt(g, dy, allow_fallback, "fc2 backward");
}

// dw = grad^T act [out, in] and db = grad summed over its N rows [out] in one GEMM (the
// BGRADB epilogue): act [N, in], grad [N, out], all contiguous.
bool WeightGradBias(const torch::Tensor& act, const torch::Tensor& grad, const torch::Tensor& dw,
                    const torch::Tensor& db, bool allow_fallback) {
  LtMatmulArgs g;
  g.m = act.size(1);  // dw [out, in] row-major is in x out column-major = act^T grad
  g.n = grad.size(1);
  g.k = act.size(0);
  g.a = act.data_ptr();  // act [N, in] row-major: in x N column-major, op(A) as stored
  g.lda = g.m;
  g.transpose_b = true;  // grad [N, out] row-major is out x N column-major: op(B) = N x out
  g.b = grad.data_ptr();
  g.ldb = g.n;
  g.d = dw.data_ptr();
  g.ldd = g.m;
  g.epilogue = LtEpilogue::kBGradB;
  g.bias_grad = db.data_ptr();
  return RunLt(g, grad, allow_fallback, "weight gradient");
}

// Inputs: x, w1, b1, w2, b2 (contiguous; an empty tensor, never read, where fc2 has no bias:
// autograd records every tensor input's device, so an undefined tensor cannot be passed), then
// the three options and with_b2. Saves x, w1, w2, the pre-activation and h (what the unfused chain
// keeps too).
class FusedMlpFunction : public torch::autograd::Function<FusedMlpFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor w1, torch::Tensor b1, torch::Tensor w2,
                               torch::Tensor b2, int64_t backward_mode, int64_t gelu,
                               bool allow_fallback, bool with_b2) {
    const int64_t n = x.size(0), f = w1.size(0);
    torch::Tensor pre = torch::empty({n, f}, x.options());
    torch::Tensor h = torch::empty({n, f}, x.options());
    if (!Fc1Forward(x, w1, b1, h, pre, static_cast<MlpGelu>(gelu), allow_fallback)) {
      pre = torch::addmm(b1, x, w1.t());
      h = torch::gelu(pre, "tanh");
    }
    ctx->save_for_backward({x, w1, w2, pre, h});
    ctx->saved_data["backward"] = backward_mode;
    ctx->saved_data["allow_fallback"] = allow_fallback;
    // TunedAddmm / TunedMm: cuBLASLt with the process's GEMM settings (tuned_mm.h), as the
    // other GEMMs of the step, not LibTorch's cuBLAS (which zeroes a workspace before it).
    return with_b2 ? TunedAddmm(b2, h, w2.t()) : TunedMm(h, w2.t());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w1 = saved[1], &w2 = saved[2], &pre = saved[3],
                        &h = saved[4];
    const torch::Tensor dy = grad_outputs[0].to(x.scalar_type()).contiguous();
    const auto mode = static_cast<MlpBackward>(ctx->saved_data["backward"].toInt());
    torch::Tensor dpre, db1;
    if (mode != MlpBackward::kUnfused) {
      dpre = torch::empty_like(pre);
      if (ctx->needs_input_grad(2) && mode == MlpBackward::kDGeluBGrad) {
        db1 = torch::empty({pre.size(1)}, pre.options());
      }
      if (!DGelu(dy, w2, pre, dpre, db1, ctx->saved_data["allow_fallback"].toBool())) {
        dpre = torch::Tensor();
        db1 = torch::Tensor();
      }
    }
    if (!dpre.defined()) dpre = torch::gelu_backward(TunedMm(dy, w2), pre, "tanh");
    // fc1's bias gradient next: ColumnSum reads the rows the GEMM wrote last first, from L2.
    if (ctx->needs_input_grad(2) && !db1.defined() && mode != MlpBackward::kDGeluWGradBias) {
      db1 = ColumnSum(dpre);
    }

    torch::Tensor dx, dw1, dw2, db2;
    if (mode == MlpBackward::kDGeluWGradBias) {
      const bool fallback = ctx->saved_data["allow_fallback"].toBool();
      if (ctx->needs_input_grad(1) && ctx->needs_input_grad(2)) {
        dw1 = torch::empty_like(w1);
        db1 = torch::empty({w1.size(0)}, w1.options());
        if (!WeightGradBias(x, dpre, dw1, db1, fallback)) dw1 = db1 = torch::Tensor();
      }
      if (ctx->needs_input_grad(3) && ctx->needs_input_grad(4)) {
        dw2 = torch::empty_like(w2);
        db2 = torch::empty({w2.size(0)}, w2.options());
        if (!WeightGradBias(h, dy, dw2, db2, fallback)) dw2 = db2 = torch::Tensor();
      }
    }
    if (ctx->needs_input_grad(1) && !dw1.defined()) dw1 = TunedMm(dpre.t(), x);
    if (ctx->needs_input_grad(2) && !db1.defined()) db1 = ColumnSum(dpre);
    if (ctx->needs_input_grad(3) && !dw2.defined()) dw2 = TunedMm(dy.t(), h);
    if (ctx->needs_input_grad(4) && !db2.defined()) db2 = ColumnSum(dy);
    // d input last: the LayerNorm backward that reads it next finds it in L2.
    if (ctx->needs_input_grad(0)) dx = TunedMm(dpre, w1);
    return {
        dx, dw1, db1, dw2, db2, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

bool NeedsGrad(std::initializer_list<const torch::Tensor*> tensors) {
  if (!torch::GradMode::is_enabled()) return false;
  for (const torch::Tensor* t : tensors) {
    if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}
#endif

}  // namespace

bool FusedMlpAvailable(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                       const torch::Tensor& w2, const torch::Tensor& b2) {
#if MT_KERNELS_WITH_CUDA
  const auto t = x.scalar_type();
  if (!KernelFloat(t)) return false;
  for (const torch::Tensor* p : {&x, &w1, &b1, &w2, &b2}) {
    if (p == &b2 && !b2.defined()) continue;  // fc2 without a bias
    if (!p->defined() || !p->is_cuda() || p->scalar_type() != t) return false;
  }
  if (x.dim() != 2 || w1.dim() != 2 || w2.dim() != 2 || b1.dim() != 1 ||
      (b2.defined() && b2.dim() != 1)) {
    return false;
  }
  const int64_t n = x.size(0), k = x.size(1), f = w1.size(0), h = w2.size(0);
  if (w1.size(1) != k || b1.size(0) != f || w2.size(1) != f || (b2.defined() && b2.size(0) != h)) {
    return false;
  }
  return n > 0 && n % 8 == 0 && k % 8 == 0 && f % 8 == 0 && h % 8 == 0;
#else
  (void)x, (void)w1, (void)b1, (void)w2, (void)b2;
  return false;
#endif
}

torch::Tensor FusedMlp(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& b1,
                       const torch::Tensor& w2, const torch::Tensor& b2,
                       const FusedMlpOptions& options) {
#if MT_KERNELS_WITH_CUDA
  if (FusedMlpAvailable(x, w1, b1, w2, b2)) {
    const torch::Tensor xc = x.contiguous(), w1c = w1.contiguous(), b1c = b1.contiguous(),
                        w2c = w2.contiguous();
    if (NeedsGrad({&x, &w1, &b1, &w2, &b2})) {
      const bool with_b2 = b2.defined();
      return FusedMlpFunction::apply(
          xc, w1c, b1c, w2c, with_b2 ? b2 : torch::empty({0}, w2.options()),
          static_cast<int64_t>(options.backward), static_cast<int64_t>(options.gelu),
          options.allow_fallback, with_b2);
    }
    // Inference: the GELU in the epilogue, no pre-activation kept.
    const torch::Tensor h = torch::empty({x.size(0), w1.size(0)}, x.options());
    if (Fc1Gelu(xc, w1c, b1c, h, torch::Tensor(), options.allow_fallback)) return Fc2(h, w2c, b2);
  }
#endif
  return EagerMlp(x, w1, b1, w2, b2);
}

}  // namespace mt::kernels
