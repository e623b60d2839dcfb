#include "worker/generate/decode_graph.h"

#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/durations.h"

#if MT_GENERATE_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>

#include "worker/kernels/graph_capture.h"
#endif

namespace mt::generate {

#if MT_GENERATE_WITH_CUDA
struct DecodeGraph::Graph {
  at::cuda::CUDAGraph graph;
  bool ready = false;
};
#else
struct DecodeGraph::Graph {};
#endif

namespace {
// Eager runs on the side stream before the capture.
constexpr int kWarmupSteps = 2;
}  // namespace

bool DecodeGraph::Available() { return MT_GENERATE_WITH_CUDA != 0; }

absl::StatusOr<std::unique_ptr<DecodeGraph>> DecodeGraph::Create(model::GptModel& gpt,
                                                                 KvCache& cache,
                                                                 const torch::Device& device,
                                                                 bool capture,
                                                                 const DecodeStepOptions& step) {
  if (capture && (!device.is_cuda() || !Available())) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA graph decoding needs a CUDA device and a build against a CUDA "
                     "LibTorch (device ",
                     device.str(), ", CUDA graphs ", Available() ? "built" : "not built",
                     "); decode without it (cuda_graph = false)"));
  }
  return std::unique_ptr<DecodeGraph>(new DecodeGraph(gpt, cache, device, capture, step));
}

DecodeGraph::DecodeGraph(model::GptModel& gpt, KvCache& cache, const torch::Device& device,
                         bool capture, const DecodeStepOptions& step)
    : gpt_(gpt),
      cache_(cache),
      device_(device),
      capture_(capture),
      step_options_(step),
      graph_(std::make_unique<Graph>()),
      inputs_(DecodeInputs::For(cache, device)) {}

DecodeGraph::~DecodeGraph() {
  // The static output lives in the graph's pool: free it before the graph.
  logits_ = torch::Tensor();
}

torch::Tensor DecodeGraph::RunStep() {
  torch::NoGradGuard no_grad;
  return StaticDecodeStep(gpt_, inputs_, cache_, step_options_);
}

torch::Tensor DecodeGraph::Step(const torch::Tensor& tokens) {
  TORCH_CHECK(cache_.length() < cache_.max_len(), "KV cache full: ", cache_.length(), " + 1 > ",
              cache_.max_len());
  inputs_.tokens.copy_(tokens.reshape({cache_.batch(), 1}));
  inputs_.position.fill_(cache_.length());
  torch::Tensor logits;
  if (!capture_) {
    logits = RunStep();
  } else {
#if MT_GENERATE_WITH_CUDA
    if (!graph_->ready) Capture();
    graph_->graph.replay();
    ++replays_;
    logits = logits_;
#endif
  }
  cache_.Advance(1);
  return logits;
}

#if MT_GENERATE_WITH_CUDA
void DecodeGraph::Capture() {
  const auto start = std::chrono::steady_clock::now();
  const c10::DeviceIndex index = device_.index() < 0
                                     ? c10::cuda::current_device()
                                     : static_cast<c10::DeviceIndex>(device_.index());
  auto warm_up = [&] {
    for (int i = 0; i < kWarmupSteps; ++i) RunStep();
    return absl::OkStatus();
  };
  try {
    const absl::Status warmed =
        kernels::CaptureOnSideStream(graph_->graph, index, warm_up, [&] { logits_ = RunStep(); });
    TORCH_CHECK(warmed.ok(), "decode graph warm-up: ", warmed.ToString());
  } catch (...) {
    logits_ = torch::Tensor();
    throw;
  }
  graph_->ready = true;
  capture_seconds_ = SecondsSince(start);
}
#else
void DecodeGraph::Capture() {}
#endif

}  // namespace mt::generate
