// The single-device training loop: a GPT model, its optimizer, the lr schedule and the loss
// scaler, fed by a BatchSource. Written so that a parallelism layer (TP/PP/DP) can wrap it;
// with dp = 1 here, num_micro_batches = global_batch / micro_batch.
//
// One step, top to bottom (trainer.cc, Trainer::StepImpl):
//   lr = schedule(consumed samples); scale = loss scaler
//   seed the RNG from (seed, iteration)              -> same seed, same dropout, same losses
//   zero grads
//   for each micro-batch: loss = model(batch); backward(loss * scale / num_micro_batches)
//   optimizer: DP gradient reduction, unscale, global norm, skip on inf/NaN, clip, AdamW on
//     fp32 master weights (all on the device)
//   loss scaler update; metrics; a log line every log_interval steps
//
// The reported loss is the mean over every token of the global batch (= the mean of the
// micro-batch means, the micro-batches being equal). A step does not wait for the device: the
// loss, grad norm and skip flag stay there and are read at log steps (every
// logging.log_interval-th step and the last), and every step when the loss scaler is dynamic
// (it needs the skip flag) or with TrainerOptions::sync_every_step (StepMetrics::synced).
// LibTorch's exceptions stop here and come out as absl::Status (DESIGN.md §8.1): kResourceExhausted
// for out-of-memory, kInternal for the rest. No LibTorch in this header.
//
// Thread-compatible: one thread drives a Trainer.
#ifndef MT_WORKER_ENGINE_TRAINER_H_
#define MT_WORKER_ENGINE_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/activity.h"
#include "worker/engine/batch_source.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/lr_schedule.h"
#include "worker/kernels/gemm_tuning.h"
#include "worker/parallel/comm_stats.h"

namespace mt::v1 {
class JobSpec;
}  // namespace mt::v1

namespace at {
class Tensor;
}  // namespace at

namespace mt::model {
class GptModel;
struct GptConfig;
}  // namespace mt::model

namespace mt::parallel {
class Collectives;
class ProcessGroups;
struct PipelineMicroBatch;
}  // namespace mt::parallel

namespace mt::engine {

class MixedPrecisionOptimizer;
struct OptimizerConfig;
struct OptimizerParallelConfig;

// Runtime choices that are not part of the job spec.
struct TrainerOptions {
  // "cpu", "cuda" (= "cuda:0") or "cuda:N".
  std::string device = "cpu";
  // Peak FLOP/s of the device at the training precision, for MFU (989e12 for an H200 in
  // bf16); 0 = MFU not reported.
  double peak_flops_per_second = 0.0;
  // Devices the whole job runs on (TP x PP x DP): MFU is per device, so the job's tokens/s is
  // divided by it. 0 = the data-parallel size (a job without model parallelism).
  int num_devices = 0;
  // One progress line on stderr every logging.log_interval steps.
  bool log_progress = true;
  // Dynamic loss scaling (with the spec's settings) whatever the precision. fp16 has it
  // anyway; this exists to exercise overflow handling where fp16 cannot run (CPU).
  bool force_dynamic_loss_scaling = false;
  // "auto", "math" or "fused" (see model::AttentionBackend).
  std::string attention_backend = "auto";
  // The output layer and its loss fused into one autograd node on CUDA
  // (model::GptConfig::fused_lm_head; on by default, see there).
  bool fused_lm_head = true;
  // The MLP's element-wise work in cuBLASLt epilogues on CUDA (model::GptConfig::fused_mlp).
  bool fused_mlp = true;
  // Where the fused MLP's fc1 applies its GELU (model::GptConfig::mlp_gelu): "auto" (the faster
  // for the shape, timed once), "epilogue" or "kernel".
  std::string mlp_gelu = "auto";
  // LayerNorm (+ the attention's residual add) through the fused kernels on CUDA
  // (model::GptConfig::fused_layernorm; see there).
  bool fused_layernorm = true;
  // The QKV projection's backward gather (model::GptConfig::fused_qkv; see there).
  bool fused_qkv = true;
  // The embeddings' backward kernel (model::GptConfig::fused_embedding; see there).
  bool fused_embedding = true;
  // The output projection's and fc2's biases added and summed by the next LayerNorm's kernels
  // (model::GptConfig::fold_linear_bias; see there).
  bool fold_linear_bias = true;
  // Hidden dropout inside the next LayerNorm's kernel (model::GptConfig::fused_dropout_add).
  bool fused_dropout_add = false;
  // Each step's forward and backward replayed from one CUDA graph (step_graph.h) where
  // StepGraphBlocker allows it (one GPU, one micro-batch a step, no dropout that
  // recomputation reruns); elsewhere the eager step. With log_progress, one line says which and
  // why.
  bool cuda_graph = true;
  // AdamW's update on a CUDA stream of its own, overlapping the next step's forward part by part
  // (OptimizerConfig::overlap_update), where the step is a CUDA graph (cuda_graph; its replays
  // run at a higher priority than the update, step_graph.h) and the gradients are per parameter
  // (bf16 or fp32). An eager step keeps the update in the step. With log_progress, one line
  // says when it overlaps.
  bool overlap_optimizer = true;
  // cuBLASLt's candidate algorithms timed once per problem and the fastest kept, for the LM
  // head's, the MLP's and the attention's linear GEMMs on CUDA (kernels::SetGemmTuning: a
  // process-wide setting, which Create applies); false runs the heuristic's first pick.
  bool gemm_tuning = true;
  // How many of cuBLASLt's candidates the tuning times per problem (kernels::
  // SetGemmTuneCandidates, process-wide like gemm_tuning); 1 to kernels::kMaxGemmTuneCandidates.
  int gemm_tune_candidates = kernels::kDefaultGemmTuneCandidates;
  // cuBLASLt given a workspace for every one of those GEMMs (kernels::SetGemmWorkspace,
  // process-wide like gemm_tuning). Off by default: for the products and forward epilogues the
  // workspace is optional, the tuning choosing per problem between algorithms that need none
  // and those that need it, whose memset before each call costs a captured step ~5 us of idle
  // GPU (gemm_tuning.h); the gradient epilogues always get it.
  bool gemm_workspace = false;
  // No optimizer: no master weights, moments or gradient buffers, only the model (a bf16
  // model's 2 bytes a parameter where training holds 14 or more, optimizer.h). For evaluation
  // jobs (worker/train/sharded_eval.h): Evaluate() runs as in training, checkpoints restore
  // their weights into it (never optimizer state, never a save), Step() fails.
  bool evaluation_only = false;
  // Data parallelism (not owned; null = a world of one). With it, each rank runs
  // global_batch / (micro_batch * dp) micro-batches on its own slice of every global batch,
  // the optimizer reduces the gradients over the DP group of `groups` (bucketed, see
  // optimizer.h and the spec's use_distributed_optimizer / overlap_* flags), and the reported
  // losses are DP means (through these collectives).
  parallel::Collectives* collectives = nullptr;
  // Every process group of this rank (worker/parallel/process_groups.h), for tensor and
  // pipeline parallelism and the distributed optimizer; null = a world of one. With a
  // pipeline group of p > 1 ranks this rank is stage pp_rank: it builds that stage's model
  // chunks from the layout's stage_layers and runs the pipeline schedule
  // (worker/parallel/pipeline.h) instead of the plain micro-batch loop; every stage reports
  // the same losses (the last stage's, broadcast) and grad norm (over all stages). Needed
  // with dp > 1: the optimizer reduces the gradients over its DP group. With a TP
  // group of size > 1 the model is this rank's tensor-parallel shard (model::ModelShard; the
  // spec's tensor_model_parallel_size must equal the group's size); every rank of a TP group
  // must be fed the same micro-batches (data slices are per DP rank), and each reports the
  // full loss. Under sequence parallelism the replicated parameters' gradients are summed
  // over the TP group before the optimizer step.
  std::shared_ptr<parallel::ProcessGroups> groups;
  // Read loss, grad norm and skip flag from the device after every step (tests and tools that
  // look at each step), not only at log steps.
  bool sync_every_step = false;
  // Told of every change of activity (activity.h); empty = nobody listens.
  ActivityListener on_activity;
};

struct StepMetrics {
  int64_t iteration = 0;  // 1-based number of the step just taken
  int64_t train_iterations = 0;
  // loss, grad_norm, skipped and skipped_total were read from the device for this step (see
  // the file comment for when). Otherwise loss and grad_norm are NaN, skipped is false and
  // skipped_total is the count at the last synced step.
  bool synced = false;
  double loss = 0.0;           // mean over the global batch's tokens
  double learning_rate = 0.0;  // the rate this step used
  double grad_norm = 0.0;      // before clipping; inf/NaN on a skipped step
  double loss_scale = 1.0;     // the scale this step used
  bool skipped = false;
  int64_t skipped_total = 0;
  // On log steps: the mean loss of the steps since the previous log step that were not
  // skipped (NaN when all were); NaN on other steps.
  double interval_loss = 0.0;
  int64_t tokens = 0;  // in this step
  int64_t consumed_samples = 0;
  double seconds = 0.0;
  double data_seconds = 0.0;  // of which waiting for the BatchSource
  // Of this step alone: on a GPU the host's time of a step that does not read the device is
  // the time to queue it, so a single step's rate is only a rough figure there.
  double tokens_per_second = 0.0;
  double mfu = 0.0;  // 0 when the peak is unknown
  // On log steps: over the steps since the previous log step (the interval ends with a read
  // of the device, so its time is the device's); 0 on other steps. What progress reports.
  double interval_tokens_per_second = 0.0;
  double interval_mfu = 0.0;
};

// Device memory: CUDA's caching-allocator counters, or the process's resident set on the CPU
// (allocated = peak = reserved = RSS).
struct MemoryStats {
  bool is_cuda = false;
  int64_t allocated_bytes = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t reserved_bytes = 0;
};

struct EvalMetrics {
  int64_t iteration = 0;  // steps taken when it ran
  double loss = 0.0;
  double perplexity = 0.0;  // exp(min(loss, 20)), as Megatron prints it
  int64_t batches = 0;      // global batches evaluated
  double seconds = 0.0;
};

// Sizes and totals the trainer derived from the spec.
struct TrainPlan {
  int64_t micro_batch_size = 0;
  int64_t global_batch_size = 0;
  int64_t num_micro_batches = 0;
  int64_t seq_length = 0;
  int64_t train_iterations = 0;
  int64_t eval_interval = 0;  // 0 = never
  int64_t eval_iterations = 0;
  int64_t log_interval = 1;
  uint64_t seed = 0;
  int64_t data_parallel_size = 1;
  int64_t ddp_bucket_elements = 40'000'000;  // gradient all-reduce bucket
  bool use_distributed_optimizer = false;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  int64_t num_parameters = 0;
  double flops_per_token = 0.0;
  std::string precision;  // "fp32", "bf16", "fp16"
};

class Trainer {
 public:
  // Builds the model (seeded with training.seed), the optimizer, the schedule and the loss
  // scaler from `spec` (unset fields take the proto's defaults). `valid_data` may be null (no
  // evaluation). Errors: kInvalidArgument for a spec this trainer cannot run (a TP size other
  // than the TP group's, fp16 on the CPU, a bad device string ...), kUnimplemented for
  // pipeline or context parallelism, kFailedPrecondition for a CUDA device without CUDA.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const mt::v1::JobSpec& spec,
                                                         const TrainerOptions& options,
                                                         std::unique_ptr<BatchSource> train_data,
                                                         std::unique_ptr<BatchSource> valid_data);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step over one global batch.
  absl::StatusOr<StepMetrics> Step();
  // eval_iterations global batches of valid_data, no dropout, no gradients.
  absl::StatusOr<EvalMetrics> Evaluate();
  // Steps until train_iterations, evaluating every eval_interval steps and after the last
  // one. `on_step` / `on_eval` (optional) see every result; on_step returning false stops the
  // run early (cancellation) with OK. `after_step` (optional) runs once a step's evaluation,
  // if one is due, is done: the place for a save, so that a checkpoint of an evaluation step
  // holds the validation position after that evaluation (a resumed run then evaluates on the
  // same batches as an undisturbed one); returning false stops the run with OK.
  absl::Status Train(const std::function<bool(const StepMetrics&)>& on_step = {},
                     const std::function<void(const EvalMetrics&)>& on_eval = {},
                     const std::function<bool()>& after_step = {});

  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return consumed_samples_; }
  // Skipped steps up to the last synced step.
  int64_t skipped_iterations() const { return skipped_total_; }
  // The loss of the last step taken (as StepMetrics::loss), reading the device's statistics
  // when that step was not synced: a DP collective then, so every DP rank calls it after the
  // same step (checkpoint saves do, for their manifest). NaN before the first step.
  absl::StatusOr<double> LastStepLoss();
  const TrainPlan& plan() const { return plan_; }
  const LrSchedule& lr_schedule() const { return schedule_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  MemoryStats memory() const;
  // Time in collectives over this rank's groups since the last call, by collective and group
  // (worker/parallel/comm_stats.h; empty without groups). On CUDA, ops whose events had not
  // completed at the last synchronised step come in a later take.
  std::vector<parallel::CommTime> TakeCommunication();
  // For tests, checkpoints and the parallel layer. model() first waits for the parameter
  // all-gathers of the distributed optimizer still running (overlap_param_gather).
  model::GptModel& model();
  // Only where has_optimizer() (not for TrainerOptions::evaluation_only).
  MixedPrecisionOptimizer& optimizer();
  bool has_optimizer() const;
  // Whether the steps so far replay a CUDA graph (TrainerOptions::cuda_graph, captured at the
  // first step).
  bool step_graph_captured() const;
  // Each trainable parameter this rank holds, once (a tied one under its first name), under
  // the whole model's names, every chunk of a pipeline stage: what the optimizer updates and a
  // checkpoint holds. Waits as model() does.
  std::vector<std::pair<std::string, at::Tensor>> Parameters();

  // --- Checkpoints (worker/checkpoint) ----------------------------------------------------
  // Global validation samples evaluated so far (the validation loader's position).
  int64_t valid_consumed_samples() const { return valid_consumed_samples_; }
  // Puts the loop where a checkpoint left it: the counters, and the validation source moved
  // past `valid_consumed_samples` (read and dropped). Weights and optimizer state are restored
  // through model() and optimizer(), the loss scale through mutable_loss_scaler(). The
  // training source must already start at `consumed_samples`.
  absl::Status RestoreProgress(int64_t iteration, int64_t consumed_samples,
                               int64_t skipped_iterations, int64_t valid_consumed_samples);
  LossScaler& mutable_loss_scaler() { return scaler_; }

 private:
  struct State;  // the LibTorch side (device, model, optimizer)
  Trainer(TrainPlan plan, LrSchedule schedule, LossScaler scaler, TrainerOptions options,
          std::unique_ptr<BatchSource> train_data, std::unique_ptr<BatchSource> valid_data);
  absl::StatusOr<StepMetrics> StepImpl();
  absl::StatusOr<EvalMetrics> EvaluateImpl();
  // Reads the device-side statistics of the steps since the last read into `m` (DP means).
  absl::Status SyncStepMetrics(StepMetrics* m);
  bool IsLogStep(int64_t iteration) const {
    return iteration % plan_.log_interval == 0 || iteration == plan_.train_iterations;
  }
  // Without pipeline parallelism: the whole model and, unless evaluation_only, its optimizer
  // (`step_graph`: the step will be captured, so AdamW's update may overlap the forward).
  absl::Status CreateModelAndOptimizer(const mt::v1::JobSpec& spec, const model::GptConfig& config,
                                       OptimizerConfig opt_config,
                                       OptimizerParallelConfig opt_parallel, bool step_graph);
  // The set-up lines on stderr: the step's form (graph or eager), the model, the batch, DP.
  void LogSetup(const std::string& graph_blocker) const;
  // Pipeline parallelism (trainer.cc, "Pipeline parallelism"): this stage's chunks and
  // optimizer; the micro-batches of a step on the device; one step's schedule (returns the
  // loss summed over the micro-batches, on every stage); evaluation through the pipeline.
  absl::Status CreatePipelineStage(const mt::v1::JobSpec& spec, const model::GptConfig& config,
                                   const OptimizerConfig& opt_config,
                                   OptimizerParallelConfig opt_parallel);
  absl::StatusOr<std::vector<parallel::PipelineMicroBatch>> ReadMicroBatches(BatchSource& source,
                                                                             int64_t count,
                                                                             double* data_seconds);
  absl::StatusOr<at::Tensor> PipelineForwardBackward(double loss_scale, double* data_seconds);
  absl::StatusOr<at::Tensor> PipelineEvaluate(int64_t batches);
  void LogStep(StepMetrics* m);  // sets the interval figures on log steps
  void Tell(Activity a, int64_t step) const {
    if (options_.on_activity) options_.on_activity(a, step);
  }
  // The job's device count for MFU (TrainerOptions::num_devices).
  double NumDevices() const {
    return options_.num_devices > 0 ? options_.num_devices
                                    : static_cast<double>(plan_.data_parallel_size);
  }

  TrainPlan plan_;
  LrSchedule schedule_;
  LossScaler scaler_;
  TrainerOptions options_;
  std::unique_ptr<BatchSource> train_data_;
  std::unique_ptr<BatchSource> valid_data_;
  std::unique_ptr<State> state_;
  int64_t iteration_ = 0;
  int64_t consumed_samples_ = 0;
  int64_t skipped_total_ = 0;
  int64_t valid_consumed_samples_ = 0;
  int64_t synced_iteration_ = -1;  // the last step SyncStepMetrics read, and its loss
  double synced_loss_ = 0.0;
  int64_t vocab_size_ = 0;

  // Progress-line accumulators since the last line (Megatron averages over the interval).
  struct Interval {
    double loss_sum = 0.0;  // DP means of the non-skipped steps' losses read so far
    int64_t loss_count = 0;
    int64_t steps = 0;
    int64_t skipped = 0;
    int64_t tokens = 0;
    double seconds = 0.0;
  };
  Interval interval_;
  double total_seconds_ = 0.0;
};

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_TRAINER_H_
