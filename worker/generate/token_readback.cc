#include "worker/generate/token_readback.h"

#include <ATen/ATen.h>

#if MT_GENERATE_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace mt::generate {

#if MT_GENERATE_WITH_CUDA
struct TokenReadback::Event {
  at::cuda::CUDAEvent done;  // recorded after the copy on the tokens' stream
  bool pending = false;
};
#else
struct TokenReadback::Event {};
#endif

TokenReadback::TokenReadback(int64_t n, const torch::Device& device)
    : event_(std::make_unique<Event>()) {
  host_ = torch::empty({n}, torch::kLong);
#if MT_GENERATE_WITH_CUDA
  if (device.is_cuda()) host_ = host_.pin_memory();
#else
  (void)device;
#endif
}

TokenReadback::~TokenReadback() = default;

void TokenReadback::Enqueue(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.numel() == host_.numel() && tokens.scalar_type() == torch::kLong,
              "TokenReadback: ", host_.numel(), " int64 tokens expected, got ", tokens.sizes(), " ",
              tokens.scalar_type());
#if MT_GENERATE_WITH_CUDA
  if (tokens.is_cuda()) {
    host_.copy_(tokens.reshape({-1}), /*non_blocking=*/true);
    event_->done.record(c10::cuda::getCurrentCUDAStream(tokens.device().index()));
    event_->pending = true;
    return;
  }
#endif
  host_.copy_(tokens.reshape({-1}));
}

const int64_t* TokenReadback::Wait() {
#if MT_GENERATE_WITH_CUDA
  if (event_->pending) {
    event_->done.synchronize();
    event_->pending = false;
  }
#endif
  return host_.data_ptr<int64_t>();
}

}  // namespace mt::generate
