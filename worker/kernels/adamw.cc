#include "worker/kernels/adamw.h"

#include <torch/torch.h>

#include <cstring>

#if MT_KERNELS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "worker/kernels/adamw_launch.h"
#include "worker/kernels/kind_of.h"
#endif

namespace mt::kernels {
namespace {

#if MT_KERNELS_WITH_CUDA
// The pieces' defined gradients are 1-D, contiguous, of one floating dtype and on `device`.
// Sets *dtype to theirs (kFloat where none is defined).
template <typename Piece>
bool GradsFit(const std::vector<Piece>& pieces, const torch::Device& device,
              torch::ScalarType* dtype) {
  bool first = true;
  *dtype = torch::kFloat;
  for (const Piece& p : pieces) {
    const torch::Tensor& g = p.grad;
    if (!g.defined()) continue;
    if (g.device() != device || g.dim() != 1 || !g.is_contiguous() ||
        !KernelFloat(g.scalar_type()) || (!first && g.scalar_type() != *dtype)) {
      return false;
    }
    *dtype = g.scalar_type();
    first = false;
  }
  return true;
}

bool Fp32Buffer(const torch::Tensor& t, const torch::Device& device) {
  return t.defined() && t.device() == device && t.scalar_type() == torch::kFloat && t.dim() == 1 &&
         t.is_contiguous();
}

bool DeviceScalar(const torch::Tensor& t, const torch::Device& device) {
  return t.defined() && t.device() == device && t.scalar_type() == torch::kFloat && t.numel() == 1;
}

// The descriptor table on the device: filled on the host in pinned memory and copied behind
// the stream's work (the caching host allocator keeps the host side until the copy is done).
torch::Tensor Upload(const std::vector<AdamWPieceDesc>& descs, const torch::Device& device) {
  const auto bytes = static_cast<int64_t>(descs.size() * sizeof(AdamWPieceDesc));
  torch::Tensor host =
      torch::empty({bytes}, torch::TensorOptions().dtype(torch::kByte).pinned_memory(true));
  std::memcpy(host.data_ptr(), descs.data(), static_cast<size_t>(bytes));
  return host.to(device, /*non_blocking=*/true);
}

// Appends a piece of `numel` > 0 elements at tile *tiles and advances *tiles past it.
void Append(const torch::Tensor& grad, int64_t state_begin, int64_t model_begin, int64_t numel,
            bool decay, bool counted, std::vector<AdamWPieceDesc>* descs, int64_t* tiles) {
  AdamWPieceDesc d;
  d.grad = grad.defined() ? grad.data_ptr() : nullptr;
  d.state_begin = state_begin;
  d.model_begin = model_begin;
  d.numel = numel;
  d.tile_begin = *tiles;
  d.weight_decay = decay ? 1 : 0;
  d.counted = counted ? 1 : 0;
  descs->push_back(d);
  *tiles += (numel + kAdamWTileElements - 1) / kAdamWTileElements;
}

cudaStream_t StreamOf(const torch::Device& device) {
  return at::cuda::getCurrentCUDAStream(device.index()).stream();
}
#endif

}  // namespace

bool FusedOptimizerKernelsBuilt() { return MT_KERNELS_WITH_CUDA != 0; }

bool GradSumOfSquaresSupports(const std::vector<GradPiece>& pieces) {
#if MT_KERNELS_WITH_CUDA
  for (const GradPiece& p : pieces) {
    if (!p.grad.defined()) continue;
    torch::ScalarType dtype;
    return p.grad.is_cuda() && GradsFit(pieces, p.grad.device(), &dtype);
  }
#else
  (void)pieces;
#endif
  return false;
}

torch::Tensor GradSumOfSquares(const std::vector<GradPiece>& pieces) {
  TORCH_CHECK(GradSumOfSquaresSupports(pieces),
              "GradSumOfSquares: needs a CUDA build and contiguous 1-D CUDA gradients of one "
              "dtype (fp32, bf16 or fp16)");
#if MT_KERNELS_WITH_CUDA
  std::vector<AdamWPieceDesc> descs;
  int64_t tiles = 0;
  torch::ScalarType dtype = torch::kFloat;
  torch::Device device = torch::kCPU;
  for (const GradPiece& p : pieces) {
    if (!p.grad.defined() || p.grad.numel() == 0) continue;  // adds nothing
    dtype = p.grad.scalar_type();
    device = p.grad.device();
    Append(p.grad, 0, 0, p.grad.numel(), false, p.counted, &descs, &tiles);
  }
  const auto options = torch::TensorOptions().dtype(torch::kFloat).device(device);
  if (descs.empty()) return torch::zeros({1}, options);
  const torch::Tensor table = Upload(descs, device);
  torch::Tensor partial = torch::empty({2 * GradSumOfSquaresBlocks()}, options);
  torch::Tensor sumsq = torch::empty({1}, options);
  const cudaError_t err =
      LaunchGradSumOfSquares(KindOf(dtype), static_cast<const AdamWPieceDesc*>(table.data_ptr()),
                             static_cast<int>(descs.size()), tiles, partial.data_ptr<float>(),
                             sumsq.data_ptr<float>(), StreamOf(device));
  TORCH_CHECK(err == cudaSuccess, "GradSumOfSquares launch: ", cudaGetErrorString(err));
  return sumsq;
#else
  return torch::Tensor();
#endif
}

bool FusedAdamWSupports(const AdamWState& s, const std::vector<AdamWPiece>& pieces) {
#if MT_KERNELS_WITH_CUDA
  if (pieces.empty() || !s.master.defined() || !s.master.is_cuda()) return false;
  const torch::Device device = s.master.device();
  if (!Fp32Buffer(s.master, device) || !Fp32Buffer(s.exp_avg, device) ||
      !Fp32Buffer(s.exp_avg_sq, device) || !DeviceScalar(s.step, device) ||
      !DeviceScalar(s.grad_divisor, device) || !DeviceScalar(s.found_inf, device)) {
    return false;
  }
  const int64_t state = s.exp_avg.numel();
  if (s.exp_avg_sq.numel() != state || (!s.master_is_model && s.master.numel() != state)) {
    return false;
  }
  if (s.master_is_model == s.model.defined()) return false;  // one model copy, or none
  if (s.model.defined() &&
      (s.model.device() != device || s.model.dim() != 1 || !s.model.is_contiguous() ||
       (s.model.scalar_type() != torch::kBFloat16 && s.model.scalar_type() != torch::kHalf))) {
    return false;
  }
  const int64_t model = s.master_is_model ? s.master.numel() : s.model.numel();
  for (const AdamWPiece& p : pieces) {
    if (p.numel < 0 || p.state_begin < 0 || p.state_begin + p.numel > state) return false;
    if (p.model_begin < 0 || p.model_begin + p.numel > model) return false;
    if (p.grad.defined() && p.grad.numel() != p.numel) return false;
  }
  torch::ScalarType dtype;
  return GradsFit(pieces, device, &dtype);
#else
  (void)s;
  (void)pieces;
  return false;
#endif
}

void FusedAdamW(const AdamWState& s, const std::vector<AdamWPiece>& pieces, const AdamWHyper& h) {
  TORCH_CHECK(FusedAdamWSupports(s, pieces),
              "FusedAdamW: needs a CUDA build, fp32 contiguous state and 0-dim fp32 scalars on "
              "one device, a bf16/fp16 model copy or none, gradients of one dtype, and pieces "
              "inside the buffers");
#if MT_KERNELS_WITH_CUDA
  const torch::Device device = s.master.device();
  std::vector<AdamWPieceDesc> descs;
  int64_t tiles = 0;
  torch::ScalarType dtype = torch::kFloat;
  for (const AdamWPiece& p : pieces) {
    if (p.numel == 0) continue;
    if (p.grad.defined()) dtype = p.grad.scalar_type();
    Append(p.grad, p.state_begin, p.model_begin, p.numel, p.weight_decay, true, &descs, &tiles);
  }
  if (descs.empty()) return;
  const torch::Tensor table = Upload(descs, device);
  AdamWArgs a;
  a.master = s.master.data_ptr<float>();
  a.master_is_model = s.master_is_model;
  a.exp_avg = s.exp_avg.data_ptr<float>();
  a.exp_avg_sq = s.exp_avg_sq.data_ptr<float>();
  a.model = s.model.defined() ? s.model.data_ptr() : nullptr;
  a.step = s.step.data_ptr<float>();
  a.grad_divisor = s.grad_divisor.data_ptr<float>();
  a.found_inf = s.found_inf.data_ptr<float>();
  a.lr = static_cast<float>(h.lr);
  a.beta1 = static_cast<float>(h.beta1);
  a.beta2 = static_cast<float>(h.beta2);
  a.eps = static_cast<float>(h.eps);
  a.weight_decay = static_cast<float>(h.weight_decay);
  const FloatKind model_kind =
      s.model.defined() ? KindOf(s.model.scalar_type()) : FloatKind::kFloat32;
  const cudaError_t err =
      LaunchAdamW(KindOf(dtype), model_kind, static_cast<const AdamWPieceDesc*>(table.data_ptr()),
                  static_cast<int>(descs.size()), tiles, a, StreamOf(device));
  TORCH_CHECK(err == cudaSuccess, "FusedAdamW launch: ", cudaGetErrorString(err));
#else
  (void)h;
#endif
}

}  // namespace mt::kernels
