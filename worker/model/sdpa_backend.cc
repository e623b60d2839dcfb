#include "worker/model/sdpa_backend.h"

#include <ATen/Context.h>
#include <torch/torch.h>

#include <mutex>

#if TORCH_VERSION_MAJOR >= 2
#define MT_SDPA_SWITCHES 1
#else
#define MT_SDPA_SWITCHES 0
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define MT_SDPA_CUDNN 1
#else
#define MT_SDPA_CUDNN 0
#endif

namespace mt::model {
namespace {

#if MT_SDPA_SWITCHES
// The switches LibTorch reads when it picks an SDPA kernel.
struct SdpaSwitches {
  bool flash = false;
  bool mem_efficient = false;
  bool math = false;
  bool cudnn = false;

  static SdpaSwitches Read() {
    at::Context& c = at::globalContext();
    SdpaSwitches s;
    s.flash = c.userEnabledFlashSDP();
    s.mem_efficient = c.userEnabledMemEfficientSDP();
    s.math = c.userEnabledMathSDP();
#if MT_SDPA_CUDNN
    s.cudnn = c.userEnabledCuDNNSDP();
#endif
    return s;
  }
  void Write() const {
    at::Context& c = at::globalContext();
    c.setSDPUseFlash(flash);
    c.setSDPUseMemEfficient(mem_efficient);
    c.setSDPUseMath(math);
#if MT_SDPA_CUDNN
    c.setSDPUseCuDNN(cudnn);
#endif
  }
};

std::mutex& SwitchMutex() {
  static std::mutex* m = new std::mutex;  // never destroyed: callers may outlive statics
  return *m;
}
#endif

}  // namespace

bool SdpaBackendAvailable(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::kCudnn:
      return MT_SDPA_CUDNN != 0 && torch::cuda::is_available();
    case AttentionBackend::kFlash:
      return MT_SDPA_SWITCHES != 0 && torch::cuda::is_available();
    case AttentionBackend::kMath:
    case AttentionBackend::kAuto:
      return true;
    case AttentionBackend::kFused:
      return MT_SDPA_SWITCHES != 0;
  }
  return false;
}

torch::Tensor RestrictedCausalSdpa(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, double dropout_p,
                                   AttentionBackend backend) {
  TORCH_CHECK(backend == AttentionBackend::kCudnn || backend == AttentionBackend::kFlash,
              "RestrictedCausalSdpa takes the cudnn or flash backend");
  TORCH_CHECK(SdpaBackendAvailable(backend), "attention backend ",
              backend == AttentionBackend::kCudnn ? "cudnn" : "flash",
              " needs a CUDA LibTorch >= ", backend == AttentionBackend::kCudnn ? "2.3" : "2.0",
              "; this is ", TORCH_VERSION);
  TORCH_CHECK(q.is_cuda(), "attention backends cudnn and flash run on CUDA tensors only");
#if MT_SDPA_SWITCHES
  std::lock_guard<std::mutex> lock(SwitchMutex());
  const SdpaSwitches saved = SdpaSwitches::Read();
  SdpaSwitches only;
  only.cudnn = backend == AttentionBackend::kCudnn;
  only.flash = backend == AttentionBackend::kFlash;
  only.Write();
  try {
    torch::Tensor out = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p,
                                                         /*is_causal=*/true);
    saved.Write();
    return out;
  } catch (...) {
    saved.Write();
    throw;
  }
#else
  (void)k;
  (void)v;
  (void)dropout_p;
  TORCH_CHECK(false, "unreachable: no SDPA switches in this LibTorch");
#endif
}

}  // namespace mt::model
