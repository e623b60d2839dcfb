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
//   - every host value a kernel takes: a constant loss scale (not the dynamic scaler);
//   - the host's bookkeeping: no fp16, whose gradients are folded into fp32 master gradients by
//     a step of the optimizer's own (FinishMicroBatch) that a replay would skip, and that the
//     optimizer's step would then run again on the zeroed fp16 gradients;
//   - the random state: no dropout (the step's seed is set on the host every step);
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
  bool fp16 = false;  // training.precision fp16 (its gradients folded into fp32 master ones)
  bool dynamic_loss_scale = false;
};

// Empty when the step can be captured; else the first reason it cannot, naming the setting and
// what would allow it.
std::string StepGraphBlocker(const StepGraphSetting& s);

class StepGraph {
 public:
  // One micro-batch's forward and backward on `sample` (the loss scaled and backpropagated, the
  // gradients accumulated into the parameters' .grad); returns the detached loss.
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
  // replays on the current stream. Returns the loss, a tensor the next call overwrites (read
  // or copy it before). Throws c10::Error where CUDA or the capture fails; an error for a
  // sample whose shape differs from the captured one.
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
