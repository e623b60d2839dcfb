// Capturing a CUDA graph on a side stream, as the decode step (worker/generate/decode_graph.cc),
// the training step (worker/engine/step_graph.cc) and the kernels' GPU tests do: a capture
// cannot run on the default stream, and the work before it (warm-ups that make per-stream
// state outside the capture) must run on the stream it captures on. Header-only; include only
// where LibTorch has CUDA.
#ifndef MT_WORKER_KERNELS_GRAPH_CAPTURE_H_
#define MT_WORKER_KERNELS_GRAPH_CAPTURE_H_

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <functional>

#include "absl/status/status.h"

namespace mt::kernels {

// On a side stream of `device` that starts after the current stream's work: `prepare` (not
// captured; its error ends the call before any capture), then `body` captured into `graph`. A
// capture that `body` breaks by throwing is ended before the exception goes on (so the stream
// works again; the end's own error is secondary). The current stream then waits for the side
// stream, so replays on it come after the prepared work.
inline absl::Status CaptureOnSideStream(at::cuda::CUDAGraph& graph, c10::DeviceIndex device,
                                        const std::function<absl::Status()>& prepare,
                                        const std::function<void()>& body) {
  c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device);
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
  at::cuda::CUDAEvent inputs_ready;
  inputs_ready.record(current);
  inputs_ready.block(side);
  absl::Status status;
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    status = prepare();
    if (status.ok()) {
      graph.capture_begin();
      try {
        body();
      } catch (...) {
        try {
          graph.capture_end();
        } catch (...) {
        }
        throw;
      }
      graph.capture_end();
    }
  }
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(current);
  return status;
}

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_GRAPH_CAPTURE_H_
