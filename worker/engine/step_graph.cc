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
#include "worker/model/generator_state.h"
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
  // Full recomputation reruns both dropouts, selective the attention's.
  const bool hidden = s.recompute_full && s.hidden_dropout != 0.0;
  const bool attention = (s.recompute_full || s.recompute_selective) && s.attention_dropout != 0.0;
  if (hidden || attention) {
    return absl::StrCat("training.recompute_granularity ", s.recompute_full ? "full" : "selective",
                        " with model.", hidden ? "hidden" : "attention", "_dropout ",
                        hidden ? s.hidden_dropout : s.attention_dropout,
                        ": the recomputation restores a generator state read on the host, which "
                        "a replay would not read again (set the dropout to 0 or turn "
                        "recomputation off)");
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
  // The warm-up draws its dropout masks from the generator as the caller set it; the state is
  // put back after, so that the capture's first replay draws the same masks as an eager step.
  auto warm_up = [&]() -> absl::Status {
    {
      const model::GeneratorStateGuard caller(c10::Device(c10::kCUDA, index));
      step(sample_);
    }
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
