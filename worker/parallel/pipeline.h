// Pipeline parallelism at run time: the executor that runs one stage's schedule table
// (pipeline_schedule.h) over this rank's model chunks, with activations and gradients sent
// point to point over the pipeline group (c10d send/recv: Gloo on CPU, NCCL on GPU, peers
// named by their index in the group).
//
//   forward(mb, chunk)   input = the micro-batch's tokens on virtual stage 0, else the
//                        activation received for (mb, chunk); output kept for the backward;
//                        on the last virtual stage the output is the micro-batch's loss
//   backward(mb, chunk)  last virtual stage: backward of loss * loss_scale / m; else backward
//                        of the output with the gradient received for it; the input's
//                        gradient is what the next batch sends back
//   communicate(ops)     every send/recv of the batch posted together (one NCCL group), then
//                        waited for; with overlap_p2p_comm (--overlap-p2p-comm) nothing is
//                        waited for here: a forward/backward waits for the receive it consumes
//                        and the step waits for its sends at the end
//
// Shapes are static (micro-batch, sequence (/tp under sequence parallelism), hidden) and the
// dtype is the model's, so no shape exchange: a send of any other shape is an error. Every
// stage of a pipeline runs the same micro-batches in the same order.
//
// LibTorch and c10d in this header: include it from LibTorch translation units only.
// Thread-compatible: one training thread drives an executor.
#ifndef MT_WORKER_PARALLEL_PIPELINE_H_
#define MT_WORKER_PARALLEL_PIPELINE_H_

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/parallel/pipeline_schedule.h"
#include "worker/parallel/process_groups.h"

namespace mt::parallel {

struct PipelineConfig {
  int num_micro_batches = 1;  // per step, per pipeline
  int num_chunks = 1;         // model chunks of this stage (virtual pipeline size)
  // The tensor that crosses a stage boundary, e.g. {micro_batch, seq_length, hidden}.
  std::vector<int64_t> activation_shape;
  at::ScalarType activation_dtype = at::kFloat;
  c10::Device device = c10::Device(c10::kCPU);
  bool overlap_p2p_comm = false;
  // Timing (bench/pipeline): when set, called after every action so that compute_seconds is
  // exact on an asynchronous device (e.g. torch::cuda::synchronize). Slows the step.
  std::function<void()> synchronize;
};

// What one micro-batch brings: tokens (needed on the first stage) and targets (needed on the
// last), both [micro_batch, seq] int64 on the device; undefined where not needed.
struct PipelineMicroBatch {
  at::Tensor tokens;
  at::Tensor targets;
};

// Runs model chunk `chunk` of this stage. `input` is the tokens on virtual stage 0, else the
// hidden state; the result is the hidden state for the next virtual stage, or, on the last
// virtual stage, the micro-batch's mean loss over `targets` (a 0-dim fp32/fp64 tensor).
using ChunkForward =
    std::function<at::Tensor(int chunk, const at::Tensor& input, const at::Tensor& targets)>;

struct PipelineStepResult {
  // Sum of the micro-batches' losses; only the last stage has them (0 elsewhere).
  double loss_sum = 0.0;
  // Seconds this stage waited in send/recv.
  double p2p_seconds = 0.0;
  // Seconds in forwards and backwards (host time; exact with PipelineConfig::synchronize),
  // and of the whole schedule: 1 - compute/total is this stage's idle share (the bubble).
  double compute_seconds = 0.0;
  double seconds = 0.0;
};

class PipelineExecutor {
 public:
  // `pp` is this rank's pipeline group (its rank = the stage). INVALID_ARGUMENT for a config
  // the schedule rejects (e.g. interleaving with m not a multiple of p).
  static absl::StatusOr<std::unique_ptr<PipelineExecutor>> Create(const GroupHandle& pp,
                                                                  const PipelineConfig& config);

  int stage() const { return stage_; }
  int num_stages() const { return num_stages_; }
  bool is_first_stage() const { return stage_ == 0; }
  bool is_last_stage() const { return stage_ == num_stages_ - 1; }
  const PipelineConfig& config() const { return config_; }

  // One training step: the schedule's forwards and backwards over `micro_batches` (size
  // num_micro_batches); gradients accumulate into the chunks' parameters. `after_backward`
  // (optional) runs after every backward (e.g. folding 16-bit gradients into fp32);
  // `before_backward` (optional) before every backward, with its chunk and whether it is that
  // chunk's last backward of the step (after which the chunk's gradients are final: e.g. to
  // start their data-parallel reduction during it, --overlap-grad-reduce).
  absl::StatusOr<PipelineStepResult> Train(
      const ChunkForward& forward, const std::vector<PipelineMicroBatch>& micro_batches,
      double loss_scale, const std::function<void()>& after_backward = {},
      const std::function<void(int chunk, bool last)>& before_backward = {});
  // Forward only (evaluation): no graph, nothing kept; any number of micro-batches.
  absl::StatusOr<PipelineStepResult> Evaluate(const ChunkForward& forward,
                                              const std::vector<PipelineMicroBatch>& micro_batches);

  // `value` of the last stage, on every stage of the pipeline (a broadcast in the group).
  absl::StatusOr<double> BroadcastFromLastStage(double value);

 private:
  struct Batch;
  struct Received {
    at::Tensor tensor;
    int work = -1;  // its own work in batch->works, or -1: wait for the whole batch
    std::shared_ptr<Batch> batch;
  };
  using Key = std::pair<int, int>;  // (micro-batch, chunk)

  PipelineExecutor(const GroupHandle& pp, const PipelineConfig& config);
  absl::StatusOr<PipelineStepResult> Run(const ChunkForward& forward,
                                         const std::vector<PipelineMicroBatch>& micro_batches,
                                         bool forward_only, double loss_scale,
                                         const std::function<void()>& after_backward,
                                         const std::function<void(int, bool)>& before_backward);
  absl::StatusOr<const std::vector<PipelineAction>*> Table(int num_micro_batches,
                                                           bool forward_only);
  absl::Status Post(const std::vector<P2POp>& ops, std::map<Key, at::Tensor>* to_send_activation,
                    std::map<Key, at::Tensor>* to_send_gradient);
  absl::StatusOr<at::Tensor> TakeReceived(std::map<Key, Received>* from, const Key& key,
                                          const char* what);
  absl::Status WaitBatch(const std::shared_ptr<Batch>& batch);
  absl::Status WaitAll();
  at::Tensor NewBuffer() const;

  GroupHandle pp_;
  PipelineConfig config_;
  int stage_ = 0;
  int num_stages_ = 1;
  std::map<std::pair<int, bool>, std::vector<PipelineAction>> tables_;
  // Per step.
  std::map<Key, Received> activations_in_, gradients_in_;
  std::vector<std::shared_ptr<Batch>> outstanding_;
  double p2p_seconds_ = 0.0;
};

// In-place sum of `tensors` over `group` (a no-op when the group has nothing to do): e.g. the
// tied embedding's gradient over the embedding group, or squared norms over model-parallel
// ranks. `what` names it in errors.
absl::Status SumOverGroup(const GroupHandle& group, std::vector<at::Tensor> tensors,
                          const char* what);

}  // namespace mt::parallel

#endif  // MT_WORKER_PARALLEL_PIPELINE_H_
