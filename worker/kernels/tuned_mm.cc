#include "worker/kernels/tuned_mm.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <torch/version.h>

// LibTorch 2.9 and later expose their cuBLASLt workspace (at::cuda::getCUDABlasLtWorkspace).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
#define MT_LIBTORCH_LT_WORKSPACE 1
#else
#define MT_LIBTORCH_LT_WORKSPACE 0
#endif

#include "worker/kernels/kind_of.h"
#endif

namespace mt::kernels {

#if MT_KERNELS_WITH_CUDA
namespace {

constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;  // cuBLASLt's advice for Hopper

// A row-major [r, c] operand as cuBLAS sees it: contiguous rows (stride(0) >= c) are a
// column-major c x r matrix used as stored; contiguous columns (the transpose of a contiguous
// matrix, stride(1) >= r) a column-major r x c matrix used transposed. nullopt: neither.
struct ColumnMajor {
  bool transposed;
  int64_t ld;
};

std::optional<ColumnMajor> ColumnMajorOf(const torch::Tensor& x) {
  const int64_t r = x.size(0), c = x.size(1);
  if (x.stride(1) == 1 && x.stride(0) >= std::max<int64_t>(c, 1)) {
    return ColumnMajor{false, x.stride(0)};
  }
  if (x.stride(0) == 1 && x.stride(1) >= std::max<int64_t>(r, 1)) {
    return ColumnMajor{true, x.stride(1)};
  }
  return std::nullopt;
}

bool LtTakes(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.is_cuda() || a.dim() != 2 || b.dim() != 2 || a.size(1) != b.size(0)) return false;
  if (a.scalar_type() != b.scalar_type() || !KernelFloat(a.scalar_type())) return false;
  if (a.device() != b.device() || a.numel() == 0 || b.numel() == 0) return false;
  return !(torch::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad()));
}

// A bias the epilogue can add: [N] contiguous, 16-byte aligned, a's dtype and device.
bool BiasTakes(const torch::Tensor& bias, const torch::Tensor& a, const torch::Tensor& b) {
  return bias.dim() == 1 && bias.size(0) == b.size(1) && bias.is_contiguous() &&
         bias.scalar_type() == a.scalar_type() && bias.device() == a.device() &&
         reinterpret_cast<uintptr_t>(bias.data_ptr()) % 16 == 0 &&
         !(torch::GradMode::is_enabled() && bias.requires_grad());
}

// A scale TunedMm can give cuBLASLt: one element on a's device.
bool ScaleTakes(const torch::Tensor& scale, const torch::Tensor& a) {
  return scale.numel() == 1 && scale.device() == a.device() &&
         !(torch::GradMode::is_enabled() && scale.requires_grad());
}

// (scale where defined) a b (+ bias where defined) through cuBLASLt (LtTakes(a, b) holds);
// nullopt when cuBLASLt has no algorithm for it (nothing was queued).
std::optional<torch::Tensor> LtProduct(const torch::Tensor& a, const torch::Tensor& b,
                                       const torch::Tensor& bias,
                                       const torch::Tensor& scale = torch::Tensor()) {
  const torch::Tensor ac = ColumnMajorOf(a) ? a : a.contiguous();
  const torch::Tensor bc = ColumnMajorOf(b) ? b : b.contiguous();
  const ColumnMajor la = *ColumnMajorOf(ac), lb = *ColumnMajorOf(bc);
  const int64_t m = a.size(0), n = b.size(1), k = a.size(1);
  torch::Tensor out = torch::empty({m, n}, a.options());
  // Row-major out = a b is column-major out^T (n x m) = b^T (n x k) a^T (k x m); a bias [n]
  // is added to each of its columns, which is cuBLASLt's bias of the m = n rows.
  LtMatmulArgs g;
  g.m = n;
  g.n = m;
  g.k = k;
  g.a = bc.data_ptr();
  g.transpose_a = lb.transposed;
  g.lda = lb.ld;
  g.b = ac.data_ptr();
  g.transpose_b = la.transposed;
  g.ldb = la.ld;
  g.d = out.data_ptr();
  g.ldd = n;
  if (bias.defined()) {
    g.epilogue = LtEpilogue::kBias;
    g.bias = bias.data_ptr();
  }
  torch::Tensor alpha_beta;  // {scale, 0} in fp32: cuBLASLt's alpha and beta on the device
  if (scale.defined()) {
    alpha_beta = torch::zeros({2}, a.options().dtype(torch::kFloat));
    alpha_beta.narrow(0, 0, 1).copy_(scale.reshape({1}));
    g.scale = alpha_beta.data_ptr<float>();
  }
  const int status = TunedLtMatmul(g, out);
  if (status == 0) return out;
  TORCH_CHECK(status == kLtNoAlgorithm, bias.defined() ? "TunedAddmm" : "TunedMm",
              ": cuBLASLt: ", LtStatusName(status));
  return std::nullopt;
}

// The problems whose workspace is optional unless GemmWorkspace() (gemm_tuning.h): the plain
// products and the forward epilogues. The gradient epilogues always get it: without one,
// cuBLASLt finishes d GELU and the bias gradient in a kernel of its own, 14.5 ms against 5.8
// for the 24 fc2 input gradients of a GPT-2 350M step on an H100 (bench/RESULTS.md, 2026-12-06).
bool WorkspaceOptional(LtEpilogue epilogue) {
  switch (epilogue) {
    case LtEpilogue::kNone:
    case LtEpilogue::kBias:
    case LtEpilogue::kGeluBias:
    case LtEpilogue::kGeluAuxBias:
      return true;
    case LtEpilogue::kDGelu:
    case LtEpilogue::kDGeluBGrad:
    case LtEpilogue::kBGradB:
      return false;
  }
  return false;
}

}  // namespace

LtTuning& ProcessLtTuning() {
  static LtTuning* const tuning = new LtTuning();  // never destroyed: used until exit
  return *tuning;
}

int TunedLtMatmul(LtMatmulArgs args, const torch::Tensor& like) {
  args.kind = KindOf(like.scalar_type());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(like.device().index()).stream();
  LtTuning* const tuning = GemmTuning() ? &ProcessLtTuning() : nullptr;
  void* const handle = at::cuda::getCurrentCUDABlasLtHandle();
  const bool optional = !GemmWorkspace() && WorkspaceOptional(args.epilogue);
#if MT_LIBTORCH_LT_WORKSPACE
  // LibTorch's own cuBLASLt workspace for this stream (held for the process, and by default the
  // cuBLAS one): no second 32 MB a call, which was live at the step's peak (the LM head).
  const size_t bytes = at::cuda::getCUDABlasLtWorkspaceSize();
  if (bytes > 0) {
    return LtMatmul(args, handle, at::cuda::getCUDABlasLtWorkspace(), bytes, stream, tuning,
                    GemmTuneCandidates(), optional);
  }
#endif
  const torch::Tensor workspace =
      torch::empty({kWorkspaceBytes}, like.options().dtype(torch::kByte));
  return LtMatmul(args, handle, workspace.data_ptr(), kWorkspaceBytes, stream, tuning,
                  GemmTuneCandidates(), optional);
}
#endif

torch::Tensor TunedMm(const torch::Tensor& a, const torch::Tensor& b) {
#if MT_KERNELS_WITH_CUDA
  if (LtTakes(a, b)) {
    std::optional<torch::Tensor> out = LtProduct(a, b, torch::Tensor());
    if (out.has_value()) return *std::move(out);
  }
#endif
  return torch::mm(a, b);
}

torch::Tensor TunedMm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& scale) {
#if MT_KERNELS_WITH_CUDA
  if (LtTakes(a, b) && ScaleTakes(scale, a)) {
    std::optional<torch::Tensor> out = LtProduct(a, b, torch::Tensor(), scale);
    if (out.has_value()) return *std::move(out);
  }
#endif
  return torch::mm(a, b).mul_(scale.reshape({}));
}

torch::Tensor TunedAddmm(const torch::Tensor& bias, const torch::Tensor& a,
                         const torch::Tensor& b) {
#if MT_KERNELS_WITH_CUDA
  if (LtTakes(a, b) && BiasTakes(bias, a, b)) {
    std::optional<torch::Tensor> out = LtProduct(a, b, bias);
    if (out.has_value()) return *std::move(out);
  }
#endif
  return torch::addmm(bias, a, b);
}

GemmTuningCounts GemmTuningSoFar() {
  GemmTuningCounts counts;
#if MT_KERNELS_WITH_CUDA
  counts.problems = ProcessLtTuning().size();
  counts.moved = ProcessLtTuning().tuned_away();
  counts.with_workspace = ProcessLtTuning().with_workspace();
#endif
  return counts;
}

}  // namespace mt::kernels
