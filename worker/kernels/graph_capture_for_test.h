// A CUDA graph captured as the decode step captures one (graph_capture.h): on a side stream that
// starts after the work of the current one, one warm-up run, then the capture.
// For the kernels' GPU tests; include only where LibTorch has CUDA (MT_KERNELS_WITH_CUDA).
#ifndef MT_WORKER_KERNELS_GRAPH_CAPTURE_FOR_TEST_H_
#define MT_WORKER_KERNELS_GRAPH_CAPTURE_FOR_TEST_H_

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include <functional>

#include "absl/status/status.h"
#include "worker/kernels/graph_capture.h"

namespace mt::kernels {

// Captures run() into `graph` and returns the captured run's output: the tensor each
// graph.replay() writes again.
inline torch::Tensor CaptureForTest(const std::function<torch::Tensor()>& run,
                                    at::cuda::CUDAGraph& graph) {
  torch::Tensor out;
  const absl::Status status = CaptureOnSideStream(
      graph, c10::cuda::current_device(),
      [&] {
        run();  // warm-up
        return absl::OkStatus();
      },
      [&] { out = run(); });
  TORCH_CHECK(status.ok(), status.ToString());
  torch::cuda::synchronize();
  return out;
}

}  // namespace mt::kernels

#endif  // MT_WORKER_KERNELS_GRAPH_CAPTURE_FOR_TEST_H_
