#include "worker/generate/decode_graph.h"

#include <ATen/ATen.h>

#include <algorithm>
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

absl::StatusOr<std::unique_ptr<DecodeGraph>> DecodeGraph::Create(
    model::GptModel& gpt, KvCache& cache, const torch::Device& device, bool capture,
    const DecodeStepOptions& step, int64_t greedy_vocab) {
  if (greedy_vocab < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "greedy_vocab ", greedy_vocab,
        " is negative; pass the vocabulary size for a greedy graph or 0 for a sampling one"));
  }
  if (capture && (!device.is_cuda() || !Available())) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA graph decoding needs a CUDA device and a build against a CUDA "
                     "LibTorch (device ",
                     device.str(), ", CUDA graphs ", Available() ? "built" : "not built",
                     "); decode without it (cuda_graph = false)"));
  }
  return std::unique_ptr<DecodeGraph>(
      new DecodeGraph(gpt, cache, device, capture, step, greedy_vocab));
}

DecodeGraph::DecodeGraph(model::GptModel& gpt, KvCache& cache, const torch::Device& device,
                         bool capture, const DecodeStepOptions& step, int64_t greedy_vocab)
    : gpt_(gpt),
      cache_(cache),
      device_(device),
      capture_(capture),
      step_options_(step),
      greedy_vocab_(greedy_vocab),
      graph_(std::make_unique<Graph>()),
      inputs_(DecodeInputs::For(cache, device)) {}

DecodeGraph::~DecodeGraph() {
  // The static output lives in the graph's pool: free it before the graph.
  logits_ = torch::Tensor();
}

torch::Tensor DecodeGraph::RunStep() {
  torch::NoGradGuard no_grad;
  if (greedy_vocab_ == 0) return StaticDecodeStep(gpt_, inputs_, cache_, step_options_);
  // The argmax of the model's own dtype: the same token as of an fp32 copy (a widening is
  // exact), without the copy.
  const torch::Tensor logits = StaticDecodeLogits(gpt_, inputs_, cache_, step_options_);
  const torch::Tensor scores = logits.narrow(-1, 0, std::min(greedy_vocab_, logits.size(-1)));
  at::argmax_out(inputs_.tokens, scores, /*dim=*/-1, /*keepdim=*/true);
  return inputs_.tokens.view({cache_.batch()});
}

torch::Tensor DecodeGraph::Step(const torch::Tensor& tokens) {
  TORCH_CHECK(greedy_vocab_ == 0, "Step on a greedy decode graph: use StepGreedy");
  return Advance(tokens);
}

torch::Tensor DecodeGraph::StepGreedy(const torch::Tensor& tokens) {
  TORCH_CHECK(greedy_vocab_ > 0, "StepGreedy on a sampling decode graph: use Step");
  return Advance(tokens);
}

torch::Tensor DecodeGraph::Advance(const torch::Tensor& tokens) {
  TORCH_CHECK(cache_.length() < cache_.max_len(), "KV cache full: ", cache_.length(), " + 1 > ",
              cache_.max_len());
  TORCH_CHECK(tokens.numel() == cache_.batch(), "decode step: ", cache_.batch(),
              " tokens expected, got ", tokens.sizes());
  // A greedy graph's last output is its own input already.
  if (tokens.data_ptr() != inputs_.tokens.data_ptr()) {
    inputs_.tokens.copy_(tokens.reshape({cache_.batch(), 1}));
  }
  const int64_t position = cache_.length();
  if (device_position_ != position) inputs_.position.fill_(position);
  torch::Tensor out;
  if (!capture_) {
    out = RunStep();
    device_position_ = position;
  } else {
#if MT_GENERATE_WITH_CUDA
    if (!graph_->ready) Capture();
    graph_->graph.replay();
    ++replays_;
    out = logits_;
    device_position_ = position + 1;  // the graph's last kernel
#endif
  }
  cache_.Advance(1);
  return out;
}

#if MT_GENERATE_WITH_CUDA
void DecodeGraph::Capture() {
  const auto start = std::chrono::steady_clock::now();
  const c10::DeviceIndex index = device_.index() < 0
                                     ? c10::cuda::current_device()
                                     : static_cast<c10::DeviceIndex>(device_.index());
  // The warm-up leaves the inputs as they were: the position is advanced only by the captured
  // step, and a greedy step's argmax (which overwrites the tokens) is undone.
  auto warm_up = [&] {
    const torch::Tensor tokens = greedy_vocab_ > 0 ? inputs_.tokens.clone() : torch::Tensor();
    for (int i = 0; i < kWarmupSteps; ++i) RunStep();
    if (tokens.defined()) inputs_.tokens.copy_(tokens);
    return absl::OkStatus();
  };
  auto step = [&] {
    logits_ = RunStep();
    inputs_.position.add_(1);
  };
  try {
    const absl::Status warmed = kernels::CaptureOnSideStream(graph_->graph, index, warm_up, step);
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
