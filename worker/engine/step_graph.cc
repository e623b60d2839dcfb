#include "worker/engine/step_graph.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/durations.h"
#include "common/base/status_macros.h"

#if defined(MT_ENGINE_WITH_CUDA) && MT_ENGINE_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "worker/kernels/graph_capture.h"
#define MT_STEP_GRAPH_CUDA 1
#else
#define MT_STEP_GRAPH_CUDA 0
#endif

namespace mt::engine {

std::string StepGraphBlocker(const StepGraphSetting& s) {
  if (!s.cuda) return "the device is not a GPU";
  if (!s.graphs_built) return "this build's LibTorch has no CUDA (no CUDA graphs)";
  if (s.data_parallel != 1 || s.tensor_parallel != 1 || s.pipeline_parallel != 1) {
    return absl::StrCat("parallel.dp/tp/pp are ", s.data_parallel, "/", s.tensor_parallel, "/",
                        s.pipeline_parallel,
                        ": the graph holds no collectives (run one device for a captured step)");
  }
  if (s.micro_batches != 1) {
    return absl::StrCat(s.micro_batches,
                        " micro-batches a step: set training.global_batch_size to "
                        "micro_batch_size x dp for one");
  }
  if (s.hidden_dropout != 0.0 || s.attention_dropout != 0.0) {
    return absl::StrCat("model.hidden_dropout ", s.hidden_dropout, " / attention_dropout ",
                        s.attention_dropout,
                        ": a replay would repeat the captured masks (set both to 0)");
  }
  if (s.fp16) {
    return "training.precision fp16: its gradients are folded into fp32 master gradients by "
           "host bookkeeping that a replay skips (train in bf16 for a captured step)";
  }
  if (s.dynamic_loss_scale) {
    return "the dynamic loss scale changes between steps (a captured step needs a constant "
           "training.loss_scale)";
  }
  return std::string();
}

#if MT_STEP_GRAPH_CUDA
struct StepGraph::Graph {
  at::cuda::CUDAGraph graph;
  bool ready = false;
  // Replays run on a high-priority stream (set at the capture): work queued on other streams
  // meanwhile (the optimizer's overlapped update, update_stream.h) gets the SMs the step's
  // kernels leave free, rather than taking them first because it was queued earlier.
  std::optional<c10::cuda::CUDAStream> stream;
  at::cuda::CUDAEvent inputs_ready, done;
};
#else
struct StepGraph::Graph {
  bool ready = false;
};
#endif

bool StepGraph::Available() { return MT_STEP_GRAPH_CUDA != 0; }

StepGraph::StepGraph(const torch::Device& device, std::vector<torch::Tensor> params)
    : device_(device), params_(std::move(params)), graph_(std::make_unique<Graph>()) {}

StepGraph::~StepGraph() {
  // The tensors in the graph's pool go before the graph.
  loss_ = torch::Tensor();
  grads_.clear();
}

bool StepGraph::captured() const { return graph_->ready; }

void StepGraph::RestoreGradients() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!grads_[i].defined()) continue;
    torch::Tensor& grad = params_[i].mutable_grad();
    if (!grad.defined() || !grad.is_same(grads_[i])) grad = grads_[i];
  }
}

#if MT_STEP_GRAPH_CUDA
absl::StatusOr<torch::Tensor> StepGraph::Run(const torch::Tensor& sample,
                                             const ForwardBackward& step,
                                             const std::function<absl::Status()>& zero_grad) {
  if (!graph_->ready) {
    MT_RETURN_IF_ERROR(Capture(sample, step, zero_grad));
  } else if (sample.sizes() != sample_.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step graph: a sample of ", c10::str(sample.sizes()), " where the graph was captured for ",
        c10::str(sample_.sizes()), " (a captured step needs static shapes)"));
  } else {
    sample_.copy_(sample, /*non_blocking=*/true);
  }
  c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(graph_->stream->device_index());
  graph_->inputs_ready.record(current);
  graph_->inputs_ready.block(*graph_->stream);
  {
    c10::cuda::CUDAStreamGuard on_stream(*graph_->stream);
    graph_->graph.replay();
  }
  graph_->done.record(*graph_->stream);
  graph_->done.block(current);
  ++replays_;
  RestoreGradients();
  return loss_;
}

absl::Status StepGraph::Capture(const torch::Tensor& sample, const ForwardBackward& step,
                                const std::function<absl::Status()>& zero_grad) {
  const auto start = std::chrono::steady_clock::now();
  const c10::DeviceIndex index = device_.index() < 0
                                     ? c10::cuda::current_device()
                                     : static_cast<c10::DeviceIndex>(device_.index());
  sample_ = sample.clone();
  auto warm_up = [&]() -> absl::Status {
    step(sample_);
    MT_RETURN_IF_ERROR(zero_grad());
    // The allocator's cached blocks (the warm-up's activations among them) go back to the
    // device: from now on the graph's pool holds the step's activations, and the peak stays
    // the eager step's.
    c10::cuda::getCurrentCUDAStream(index).synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    return absl::OkStatus();
  };
  try {
    MT_RETURN_IF_ERROR(kernels::CaptureOnSideStream(graph_->graph, index, warm_up,
                                                    [&] { loss_ = step(sample_); }));
  } catch (...) {
    loss_ = torch::Tensor();
    throw;
  }
  grads_.clear();
  for (const torch::Tensor& p : params_) grads_.push_back(p.grad());
  graph_->stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, index);
  graph_->ready = true;
  capture_seconds_ = SecondsSince(start);
  return absl::OkStatus();
}
#else
absl::StatusOr<torch::Tensor> StepGraph::Run(const torch::Tensor&, const ForwardBackward&,
                                             const std::function<absl::Status()>&) {
  return absl::FailedPreconditionError(
      "step graph: this build's LibTorch has no CUDA (StepGraph::Available)");
}
#endif

}  // namespace mt::engine
