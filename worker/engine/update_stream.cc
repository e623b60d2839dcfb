#include "worker/engine/update_stream.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#if defined(MT_ENGINE_WITH_CUDA) && MT_ENGINE_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#define MT_UPDATE_STREAM_CUDA 1
#else
#define MT_UPDATE_STREAM_CUDA 0
#endif

namespace mt::engine {

namespace {
constexpr int64_t kMaxParts = 4096;
}  // namespace

#if MT_UPDATE_STREAM_CUDA
struct UpdateStream::Impl {
  c10::DeviceIndex device = 0;
  c10::cuda::CUDAStream side;
  cudaEvent_t start = nullptr;      // the main stream's work before an update
  std::vector<cudaEvent_t> events;  // each part's update done

  Impl(c10::DeviceIndex index, c10::cuda::CUDAStream stream)
      : device(index), side(std::move(stream)) {}
  ~Impl() {
    c10::cuda::CUDAGuard guard(device);
    // Destructors do not throw: a failed call here leaves nothing to clean up but the event.
    (void)cudaStreamSynchronize(side.stream());
    if (start != nullptr) (void)cudaEventDestroy(start);
    for (cudaEvent_t e : events) (void)cudaEventDestroy(e);
  }
};

bool UpdateStream::Available() { return true; }

absl::StatusOr<std::unique_ptr<UpdateStream>> UpdateStream::Create(const torch::Device& device,
                                                                   int64_t parts) {
  if (!device.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("update stream: device ", device.str(), " is not a GPU"));
  }
  if (parts < 1 || parts > kMaxParts) {
    return absl::InvalidArgumentError(
        absl::StrCat("update stream: ", parts, " parts, want 1 to ", kMaxParts));
  }
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
  c10::cuda::CUDAGuard guard(index);
  auto impl =
      std::make_unique<Impl>(index, c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index));
  auto make_event = [](cudaEvent_t* e) {
    const cudaError_t err = cudaEventCreateWithFlags(e, cudaEventDisableTiming);
    if (err == cudaSuccess) return absl::OkStatus();
    *e = nullptr;
    return absl::InternalError(
        absl::StrCat("update stream: cudaEventCreate: ", cudaGetErrorString(err)));
  };
  if (absl::Status s = make_event(&impl->start); !s.ok()) return s;
  impl->events.assign(static_cast<size_t>(parts), nullptr);
  for (cudaEvent_t& e : impl->events) {
    if (absl::Status s = make_event(&e); !s.ok()) return s;
  }
  return std::unique_ptr<UpdateStream>(new UpdateStream(std::move(impl), parts));
}

void UpdateStream::Run(const std::function<void(int64_t part)>& update,
                       const std::vector<torch::Tensor>& hold) {
  c10::cuda::CUDAGuard guard(impl_->device);
  const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream(impl_->device);
  C10_CUDA_CHECK(cudaEventRecord(impl_->start, main.stream()));
  C10_CUDA_CHECK(cudaStreamWaitEvent(impl_->side.stream(), impl_->start, 0));
  for (const torch::Tensor& t : hold) {
    if (t.defined()) t.record_stream(impl_->side.unwrap());
  }
  c10::cuda::CUDAStreamGuard on_side(impl_->side);
  for (int64_t p = 0; p < parts_; ++p) {
    update(p);
    C10_CUDA_CHECK(cudaEventRecord(impl_->events[static_cast<size_t>(p)], impl_->side.stream()));
  }
  ++runs_;
}

void UpdateStream::WaitPart(int64_t part) {
  const size_t i = static_cast<size_t>(std::clamp<int64_t>(part, 0, parts_ - 1));
  c10::cuda::CUDAGuard guard(impl_->device);
  const cudaStream_t current = c10::cuda::getCurrentCUDAStream(impl_->device).stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(current, &capture));
  const unsigned int flags =
      capture == cudaStreamCaptureStatusActive ? cudaEventWaitExternal : cudaEventWaitDefault;
  C10_CUDA_CHECK(cudaStreamWaitEvent(current, impl_->events[i], flags));
}
#else
struct UpdateStream::Impl {};

bool UpdateStream::Available() { return false; }

absl::StatusOr<std::unique_ptr<UpdateStream>> UpdateStream::Create(const torch::Device& device,
                                                                   int64_t parts) {
  (void)parts;
  return absl::FailedPreconditionError(
      absl::StrCat("update stream on ", device.str(),
                   ": this build's LibTorch has no CUDA (UpdateStream::Available)"));
}

void UpdateStream::Run(const std::function<void(int64_t part)>& update,
                       const std::vector<torch::Tensor>&) {
  // Never reached: Create fails in this build. The update runs in place, in order.
  for (int64_t p = 0; p < parts_; ++p) update(p);
  ++runs_;
}

void UpdateStream::WaitPart(int64_t) {}
#endif

UpdateStream::UpdateStream(std::unique_ptr<Impl> impl, int64_t parts)
    : impl_(std::move(impl)), parts_(parts) {}

UpdateStream::~UpdateStream() = default;

}  // namespace mt::engine
