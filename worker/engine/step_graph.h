// The forward and backward of a training step as one CUDA graph (issue #16: a step is one
// kernel launch after another, over 1,100 of them at 1.3B, and the GPU waits between them for
// about 2 ms of a 57 ms GPT-2 124M step on an H200, bench/RESULTS.md's profiles). At the first
// step: one eager forward and backward on a side stream (per-stream state such as cuBLAS
// workspaces and cuDNN plans is made there, outside the capture), its gradients dropped, the
// allocator's cached blocks returned to the device (so the graph's own memory pool does not add
// to the peak), then the capture of the forward and backward on the side stream. That step and
// every later one replay the graph after the step's stream's work, on a high-priority stream
// that the step's stream then waits for: the optimizer's overlapped update (update_stream.h),
// queued earlier on a stream of its own, takes the SMs the forward leaves free rather than
// going first. The optimizer step stays eager: its learning rate and its descriptor tables
// change from step to step, and it is a few kernels. The forward's waits for each part's update
// are captured as external event waits (a replay waits for the update queued before it).
//
// What a graph fixes at capture, and so what StepGraphBlocker asks for:
//   - every shape: one micro-batch per step (the sample is copied into the graph's input);
//   - every host value a kernel takes: the caller passes the loss scale in a device tensor it
//     fills before each Run (the dynamic scaler's value changes between steps), and keeps host
//     bookkeeping out of `step` (fp16's fold into fp32 master gradients runs after Run);
//   - the random state: dropout draws from the default CUDA generator's seed and offset as they
//     are at each replay (PyTorch registers the generator with the graph), so a replay after
//     manual_seed(s) draws the masks an eager step from seed s draws. The capture's warm-up
//     step leaves the generator as it found it. Not with recomputation: its backward restores
//     a generator state read on the host during the forward, which a replay would not reread;
//   - one device: no data, tensor or pipeline parallelism (no collectives in the graph).
// The model's parameters must keep their storage after the first step (the optimizer asks the
// same, optimizer.h). With per-parameter gradients (one rank, no fp32 master gradients) the
// gradients the graph writes live in its pool: after each replay they are handed back to the
// parameters' .grad, which the optimizer drops after its step.
//
// Thread-compatible.
#ifndef MT_WORKER_ENGINE_STEP_GRAPH_H_
#define MT_WORKER_ENGINE_STEP_GRAPH_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mt::engine {

// The trainer's settings that decide whether its step can be captured.
struct StepGraphSetting {
  bool cuda = false;          // the trainer's device is a GPU
  bool graphs_built = false;  // a build against a CUDA LibTorch (StepGraph::Available)
  int64_t data_parallel = 1;
  int64_t tensor_parallel = 1;
  int64_t pipeline_parallel = 1;
  int64_t micro_batches = 1;  // per step on this rank
  double hidden_dropout = 0.0;
  double attention_dropout = 0.0;
  // training.recompute_granularity: selective reruns the attention core (its dropout), full
  // whole blocks (both dropouts) in backward.
  bool recompute_selective = false;
  bool recompute_full = false;
};

// Empty when the step can be captured; else the first reason it cannot, naming the setting and
// what would allow it.
std::string StepGraphBlocker(const StepGraphSetting& s);

class StepGraph {
 public:
  // One micro-batch's forward and backward on `sample` (the loss scaled and backpropagated, the
  // gradients accumulated into the parameters' .grad); returns the detached loss. Every value it
  // reads that changes between steps must be in device memory (captured once, read each replay).
  using ForwardBackward = std::function<torch::Tensor(const torch::Tensor& sample)>;

  // Whether this build can capture CUDA graphs (a CUDA LibTorch).
  static bool Available();

  // `params`: the model's parameters, whose gradients the graph writes.
  StepGraph(const torch::Device& device, std::vector<torch::Tensor> params);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // One step's forward and backward on `sample` (the gradients zeroed before, as for an eager
  // step): the first call captures (`zero_grad` clears the warm-up's gradients), every call
  // replays on the current stream, with the default CUDA generator's seed and offset as they
  // are (a replay advances the offset as the eager step would). Returns the loss, a tensor the
  // next call overwrites (read or copy it before). Throws c10::Error where CUDA or the capture
  // fails; an error for a sample whose shape differs from the captured one.
  absl::StatusOr<torch::Tensor> Run(const torch::Tensor& sample, const ForwardBackward& step,
                                    const std::function<absl::Status()>& zero_grad);

  bool captured() const;
  int64_t replays() const { return replays_; }
  double capture_seconds() const { return capture_seconds_; }

 private:
  struct Graph;

  absl::Status Capture(const torch::Tensor& sample, const ForwardBackward& step,
                       const std::function<absl::Status()>& zero_grad);
  // The captured gradients back in .grad where the optimizer dropped or replaced them.
  void RestoreGradients();

  torch::Device device_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<Graph> graph_;
  torch::Tensor sample_;              // the graph's input
  torch::Tensor loss_;                // its output, in its pool
  std::vector<torch::Tensor> grads_;  // the gradients it writes (undefined: none)
  int64_t replays_ = 0;
  double capture_seconds_ = 0.0;
};

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_STEP_GRAPH_H_
