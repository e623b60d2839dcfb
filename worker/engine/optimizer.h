// The optimizer of the trainer: AdamW (or SGD with momentum) over fp32 master weights, as
// Megatron's Float16OptimizerWithFloat16Params / FP32Optimizer, with Megatron's data-parallel
// gradient buffers and distributed optimizer (ZeRO-1).
//
// Memory layout (Megatron's contiguous grad buffers): every parameter of the model becomes a
// view into one flat buffer of the model's dtype, and its .grad a view into one flat gradient
// buffer, so that
//   - gradients accumulate in place across micro-batches (autograd adds into .grad),
//   - the norm, the inf/NaN check, clipping and the update are a handful of kernels over whole
//     buffers rather than one per parameter,
//   - data parallelism reduces the buffer bucket by bucket (worker/parallel/grad_reducer.h)
// (the gradient buffer exists where something is summed in it; see below).
// fp32 model: the master weights are the model's parameters (no copy). bf16/fp16 model: an fp32
// master copy, copied back into the model after the update. The optimizer state (exp_avg,
// exp_avg_sq or the momentum buffer) is fp32. An fp64 model (tests) keeps everything in fp64.
//
// fp32 master gradients exist only where something is summed in them (16-bit model with
// accumulate_grads_in_fp32 and more than one micro-batch per step or more than one DP rank
// -- Megatron's --accumulate-allreduce-grads-in-fp32, its bf16 default -- and always for fp16).
// Otherwise the update reads the 16-bit gradients: as they are in the fused kernels (CUDA,
// OptimizerConfig::fused_adamw), or on the element-wise path converting at most chunk_elements
// of them at a time into one reused fp32 temporary. With one DP rank there is then no gradient
// buffer at all: autograd allocates each parameter's 16-bit .grad during backward (as the
// activations are freed) and Step drops them once read (PyTorch's zero_grad(set_to_none)). Bytes
// per parameter, bf16, one micro-batch, one rank: 2 (weights) + 4 (master) + 8 (moments) = 14
// between steps, + 2 (gradients) from backward to the step; with fp32 gradients 2 + 2 + 4 + 4
// + 8 = 20.
//
// Order in the buffers: parameters with weight decay first, then the others (Megatron's rule:
// no decay for biases and 1-D parameters); within each group the reverse of registration order
// (the order backward produces gradients in, so buckets fill front to back), and within that
// late gradients (OptimizerParallelConfig::late_gradient) last, so that the buckets before
// them can start during backward, then tensor-parallel-replicated parameters last (fewer
// ranges to leave out of the norm). Each
// parameter starts at a multiple of 64 elements (aligned vector loads); the padding is zero
// and stays zero.
//
// AdamW is decoupled (torch.optim.AdamW / apex FusedAdam adam_w_mode):
//   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// SGD is torch.optim.SGD as Megatron uses it (L2 decay added to the gradient, momentum buffer
// initialised with the first gradient, no dampening, no Nesterov).
//
// Step(lr, loss_scale), all on the device, no host synchronisation:
//   gradients reduced over DP (if not already, see overlap) -> unscaled (loss_scale != 1
//   only) -> sum of squares of this rank's gradients, summed over the model-parallel group
//   (and DP with the distributed optimizer) -> norm = sqrt / dp (the DP reduction sums) ->
//   found_inf = norm not finite -> clip coefficient
//   (Megatron: clip / (norm + 1e-6) when < 1) -> update, which changes NOTHING (weights,
//   moments, Adam's t) when found_inf -> 16-bit weights from the master -> DP all-gather of the
//   parameters with the distributed optimizer.
// The result holds device tensors; reading them waits for the step.
//
// Global norm (Megatron's clip_grad_norm_fp32): a tensor-parallel-replicated parameter
// (worker/model/sharding.h) is counted on TP rank 0 only, and a parameter the caller names in
// OptimizerParallelConfig::norm_duplicate (the last stage's copy of a tied embedding) not at
// all; their inf/NaN still count (they add 0 * their sum of squares). Gradients are summed over
// DP before the norm, so an inf/NaN on any DP rank reaches every rank: all skip together.
//
// Data parallelism (OptimizerParallelConfig): buckets of about bucket_elements consecutive
// elements of the gradient buffer (fp32 master gradients where they exist, else the model's
// dtype) are all-reduced, or reduce-scattered with the distributed optimizer, in place. With
// overlap_grad_reduce a hook on each parameter's gradient accumulator marks it ready during
// the last backward of the step that reaches it (BeginMicroBatch(true); under pipeline
// parallelism each model chunk's last backward, BeginMicroBatch(true, chunk), as Megatron
// enables each chunk's grad sync for its last micro-batch), and a bucket's collective starts
// as soon as it and every bucket before it are ready (the same order on every rank, as
// PyTorch's DDP). A started bucket is left alone until ReduceGradients waits for it. Distributed
// optimizer: this rank keeps master weights, moments and the update for its 1/dp slice of
// every bucket only (each bucket padded to a multiple of dp * 64 elements); after the update
// the model's parameters are all-gathered bucket by bucket. With overlap_param_gather the
// all-gathers are left running when Step returns; without forward_part they are waited for by
// the next ZeroGrad / WaitForParameters (call it before reading the parameters). With
// forward_part (Megatron's forward pre-hooks) Step starts them in the order the forward needs
// them and the forward waits for each part's buckets just before the part runs
// (WaitForParametersOfPart, called by GptModel's forward pre-hook): the first layer runs while
// the later buckets are still in flight.
//
// Overlapped update (OptimizerConfig::overlap_update): Step queues the update, after the norm
// and the clip coefficient, on the update stream in forward-part order and returns; the next
// forward's pre-hook waits for each part's update just before the part runs
// (WaitForParametersOfPart), and ZeroGrad does not wait. Everything else that reads or writes
// the state (WaitForParameters: checkpoints, evaluation, Trainer::model(); the next Step;
// RestoreStepCount; the destructor) waits for the whole update first.
//
// After Create the model must not be moved or cast (to()) and its .grad must not be replaced;
// zero the gradients with ZeroGrad(). A replaced or reset .grad (e.g. Module::zero_grad with
// set_to_none) is detected and copied back into the buffer, at a cost.
//
// With per-parameter gradients (one DP rank, no fp32 master gradients) .grad is undefined
// after ZeroGrad and Step; backward creates it.
//
// Thread-compatible; the gradient hooks run on autograd's threads during backward().
#ifndef MT_WORKER_ENGINE_OPTIMIZER_H_
#define MT_WORKER_ENGINE_OPTIMIZER_H_

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mt::v1 {
class TrainingSpec;
}  // namespace mt::v1

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace mt::kernels {
struct GradPiece;
}  // namespace mt::kernels

namespace mt::parallel {
class GradReducer;
class ProcessGroups;
}  // namespace mt::parallel

namespace mt::engine {

struct OptimizerConfig {
  enum class Kind { kAdamW, kSgd };
  Kind kind = Kind::kAdamW;
  double weight_decay = 0.01;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double sgd_momentum = 0.9;
  double clip_grad = 1.0;  // global-norm clip; 0 = off
  // 16-bit models: sum each micro-batch's gradients (and the DP reduction) in fp32 master
  // gradients (FinishMicroBatch) rather than in 16 bits, when there is more than one
  // micro-batch per step or more than one DP rank. Megatron turns this on for bf16
  // (--accumulate-allreduce-grads-in-fp32); fp16 always has fp32 master gradients.
  bool accumulate_grads_in_fp32 = true;
  // Micro-batches per step on this rank (gradient accumulation steps).
  int64_t num_micro_batches = 1;
  // fp32 master weights on CUDA (a build with the CUDA kernels): the gradients' sum of squares
  // in one kernel, and AdamW as one kernel that reads the gradients in their own dtype and
  // writes the model's copy too (worker/kernels/adamw.h). Otherwise, or false: the chain of
  // element-wise passes (the reference). Same math.
  bool fused_adamw = true;
  // AdamW's fused update on a CUDA stream of its own, part by part in the order the next forward
  // needs the parameters (update_stream.h), where it can run so: the fused kernel runs the
  // update (fused_adamw), the gradients are per parameter (one DP rank, no fp32 master
  // gradients), OptimizerParallelConfig::forward_part names the parts, and the build has CUDA.
  // Step then returns with the update queued there; the caller waits for each part's update
  // with WaitForParametersOfPart just before the part runs (the model's forward pre-hook), so
  // the update overlaps the next forward. overlaps_update() says whether it applies.
  bool overlap_update = false;
  // Elements of 16-bit gradients converted to fp32 at a time (the size of the one temporary the
  // update uses when there are no fp32 master gradients); also the piece size of the norm.
  int64_t chunk_elements = int64_t{64} << 20;

  // Unset fields take the defaults of proto/mt/v1/job_spec.proto.
  static absl::StatusOr<OptimizerConfig> FromSpec(const mt::v1::TrainingSpec& training);
  absl::Status Validate() const;
};

// Where this rank's optimizer sits among the job's ranks (the file comment says what each
// choice does). The default is a world of one.
struct OptimizerParallelConfig {
  // Every group of this rank (worker/parallel/process_groups.h); null = a world of one.
  std::shared_ptr<parallel::ProcessGroups> groups;
  bool use_distributed_optimizer = false;  // --use-distributed-optimizer
  bool overlap_grad_reduce = false;        // --overlap-grad-reduce
  bool overlap_param_gather = false;       // --overlap-param-gather
  int64_t bucket_elements = 40'000'000;    // --ddp-bucket-size
  // Parameters (by name) whose gradient another rank of the model-parallel group counts in
  // the global norm already, besides the TP-replicated ones on TP rank > 0 (those are found by
  // name, worker/model/sharding.h). Null = none.
  std::function<bool(const std::string& name)> norm_duplicate;
  // Parameters (by name) whose gradient the caller still changes between the last backward and
  // Step (a sum over another group: sequence-parallel replicas over TP, the tied embedding over
  // the embedding group). With overlap_grad_reduce their buckets, and the ones after them,
  // start in ReduceGradients rather than during backward. Null = none.
  std::function<bool(const std::string& name)> late_gradient;
  // The model chunk (0-based, < 64) holding each parameter, by name, when the step's backwards
  // reach the chunks at different times (interleaved pipeline stages): with
  // overlap_grad_reduce, BeginMicroBatch(true, c) arms chunk c's parameters only. Null = one
  // chunk.
  std::function<int(const std::string& name)> model_chunk;
  // overlap_param_gather with the distributed optimizer: the part of the forward that first
  // uses each parameter, by name (parts numbered in the order this rank's forward runs them;
  // GptModel::ForwardPartOf; < 0 = from the start). Step starts the all-gathers in that order;
  // the caller waits for them with WaitForParametersOfPart before each part, and ZeroGrad does
  // not wait. Null = all gathers waited for at once (ZeroGrad, WaitForParameters).
  std::function<int64_t(const std::string& name)> forward_part;
};

// The outcome of one Step, as device tensors (nothing waits for the step until it is read).
class OptimizerStepResult {
 public:
  OptimizerStepResult() = default;
  OptimizerStepResult(torch::Tensor grad_norm, torch::Tensor found_inf)
      : grad_norm_(std::move(grad_norm)), found_inf_(std::move(found_inf)) {}
  // A gradient was inf or NaN on some rank; nothing was changed. Reading waits for the step.
  bool skipped() const;
  // L2 norm of all unscaled gradients of the model (every rank's part) before clipping; inf
  // or NaN on a skipped step. Reading waits for the step.
  double grad_norm() const;
  // 0-dim tensors on the device: the norm (fp32 or fp64) and 1.0/0.0 for skipped (fp32).
  const torch::Tensor& grad_norm_tensor() const { return grad_norm_; }
  const torch::Tensor& found_inf_tensor() const { return found_inf_; }

 private:
  torch::Tensor grad_norm_;
  torch::Tensor found_inf_;
};

// Megatron's no-weight-decay rule: biases and 1-D parameters.
bool UsesWeightDecay(const std::string& name, const torch::Tensor& param);

// Each trainable (requires_grad) parameter of `module` once, a tied one under its first name,
// in registration order: what an optimizer over `module` updates.
std::vector<std::pair<std::string, torch::Tensor>> TrainableParameters(torch::nn::Module& module);

class GradReadyHook;
class UpdateStream;

class MixedPrecisionOptimizer {
 public:
  // Takes over the parameters of `model` (see the file comment). Errors: no parameters,
  // parameters on several devices or of several dtypes, an unsupported dtype, a DP group whose
  // backend does not match the parameters' device.
  static absl::StatusOr<std::unique_ptr<MixedPrecisionOptimizer>> Create(
      const OptimizerConfig& config, torch::nn::Module& model,
      const OptimizerParallelConfig& parallel = {});
  ~MixedPrecisionOptimizer();
  MixedPrecisionOptimizer(const MixedPrecisionOptimizer&) = delete;
  MixedPrecisionOptimizer& operator=(const MixedPrecisionOptimizer&) = delete;

  // Zeroes the gradients (call before the first micro-batch of a step). Waits for parameter
  // all-gathers still running (overlap_param_gather), unless the forward waits for them part
  // by part (forward_part).
  absl::Status ZeroGrad();
  // Call before each micro-batch's backward; `last` = the step's last backward of model chunk
  // `chunk` (OptimizerParallelConfig::model_chunk; -1 = every chunk), whose hooks start the DP
  // reduction of the buckets it completes with overlap_grad_reduce. A chunk stays armed until
  // ReduceGradients or ZeroGrad. Optional otherwise.
  void BeginMicroBatch(bool last, int chunk = -1);
  // Call after each micro-batch's backward: with fp32 master gradients, folds the micro-batch's
  // gradients into them (what a hook has folded already excepted); otherwise a no-op. Every
  // backward must be preceded by BeginMicroBatch or followed by FinishMicroBatch (Step folds
  // the last one's gradients if FinishMicroBatch has not).
  void FinishMicroBatch();
  // Sums the step's gradients over DP (the buckets no hook has started) and waits for every
  // bucket. Step calls it; a no-op on one DP rank or when already done this step.
  absl::Status ReduceGradients();
  // The update (see the file comment). Errors come from the collectives.
  absl::StatusOr<OptimizerStepResult> Step(double lr, double loss_scale);
  // Waits for the parameter all-gathers of the last step (overlap_param_gather) and for its
  // overlapped update (overlap_update; the current stream waits). Call before reading or
  // evaluating the model or the state; ZeroGrad waits for the gathers (without forward_part).
  absl::Status WaitForParameters();
  // With forward_part: waits for the all-gathers of the buckets holding a parameter of forward
  // parts <= `part` and for those parts' overlapped update (call it just before part `part`
  // runs; inside a CUDA graph capture the update's wait is captured, update_stream.h); without,
  // WaitForParameters. A no-op once they are done.
  absl::Status WaitForParametersOfPart(int64_t part);
  // OptimizerConfig::overlap_update applies (see there): Step leaves the update running.
  bool overlaps_update() const { return update_stream_ != nullptr; }

  // Something reading the state (weights, master weights, moments, Adam's t) asynchronously --
  // an async checkpoint's device-to-host copies on a stream of their own -- registers here what
  // must happen before the state changes: Step runs the fences (once, in order, on the calling
  // thread) just before its update, so that the copies overlap the next step's forward and
  // backward. A fence typically makes the current stream wait for an event. Anything else
  // writing into the state (a checkpoint restore) calls RunUpdateFences first.
  void AddUpdateFence(std::function<void()> fence) { update_fences_.push_back(std::move(fence)); }
  void RunUpdateFences();

  // Successful (not skipped) steps so far: Adam's t. Reads the device (waits for the step).
  int64_t step_count() const;
  // Checkpoints (worker/checkpoint/trainer_state.cc): Adam's t of a restored state (after the
  // last update is done with it).
  void RestoreStepCount(int64_t steps);
  const OptimizerConfig& config() const { return config_; }

  struct ParamSlot {
    std::string name;
    torch::Tensor param;  // the model's parameter (a view into the model buffer)
    int64_t offset = 0;   // in elements, into the model, gradient and master-gradient buffers
    int64_t numel = 0;
    bool weight_decay = true;
    bool counted_in_norm = true;  // false: another rank counts this gradient (file comment)
  };
  const std::vector<ParamSlot>& slots() const { return slots_; }

  // A range of the flat buffers this rank updates: [flat_begin, flat_begin + numel) of the
  // model/gradient buffers is [local_begin, local_begin + numel) of master_params (when it is
  // not the model buffer), exp_avg, exp_avg_sq and momentum. Without the distributed
  // optimizer, local == flat and the segments cover everything.
  struct Segment {
    int64_t flat_begin = 0;
    int64_t local_begin = 0;
    int64_t numel = 0;
    bool weight_decay = true;
    int64_t slot = -1;  // with per-parameter gradients: the slot it lies in
  };
  const std::vector<Segment>& segments() const { return segments_; }
  // The distributed optimizer over more than one DP rank: master_params (16-bit models),
  // exp_avg, exp_avg_sq and momentum hold this rank's segments only; the other ranks of
  // parallel_config().groups->dp() hold the rest (checkpoints gather them).
  bool distributed() const;
  const OptimizerParallelConfig& parallel_config() const { return parallel_; }

  // Flat buffers (checkpoints, tests). master_params is the model buffer for an fp32 model
  // (all of it), else this rank's fp32 master (its shard with the distributed optimizer).
  // master_grads is undefined when there are no fp32 master gradients (see the file comment).
  // exp_avg/exp_avg_sq are undefined for SGD, momentum undefined for AdamW.
  const torch::Tensor& master_params() const { return master_; }
  const torch::Tensor& master_grads() const { return master_grad_; }
  const torch::Tensor& model_params() const { return model_flat_; }
  // Undefined with per-parameter gradients.
  const torch::Tensor& model_grads() const { return model_grad_flat_; }
  const torch::Tensor& exp_avg() const { return exp_avg_; }
  const torch::Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  const torch::Tensor& momentum() const { return momentum_; }
  // The master copy of one parameter, shaped like it (not with the distributed optimizer,
  // where a parameter's master may lie on several ranks: undefined then).
  torch::Tensor MasterParam(const ParamSlot& slot) const;
  int64_t num_parameters() const { return num_parameters_; }
  bool has_fp32_master_grads() const { return master_grad_.defined() && !master_is_model_; }

  // Bytes this rank holds, by kind (the memory test; the per-step temporary included).
  struct MemoryBytes {
    int64_t params = 0;           // the model's weights (its dtype)
    int64_t grads = 0;            // the model-dtype gradient buffer
    int64_t master_params = 0;    // fp32 master weights (0 when they are the model's)
    int64_t master_grads = 0;     // fp32 master gradients (0 when there are none)
    int64_t optimizer_state = 0;  // moments or momentum
    int64_t temporary = 0;        // the conversion chunk, allocated during Step only
  };
  MemoryBytes memory_bytes() const;

  // The step's gradient of one parameter so far (call after FinishMicroBatch, before Step), as
  // a flat view of what the update will read: the fp32 master gradients, the gradient buffer,
  // or the parameter's own .grad where there is no buffer. Summing it in place over a group
  // (tied embeddings over the embedding group, sequence-parallel replicas over TP) changes
  // what Step applies. Undefined when the parameter has no gradient.
  torch::Tensor SlotGradient(const ParamSlot& slot) const;

  // Buckets of the gradient buffer (for tests and logs): [begin, end) in elements.
  std::vector<std::pair<int64_t, int64_t>> buckets() const;
  // Buckets whose reduction a gradient hook started during the last step's backward
  // (overlap_grad_reduce); the others started in ReduceGradients.
  size_t buckets_started_in_backward() const { return started_in_backward_; }
  // The waits of WaitForParametersOfPart that found gathers to wait for, between the last two
  // Steps (tests): the part, the buckets waited for then, and the gathers still running after.
  struct GatherWait {
    int64_t part = 0;
    int buckets = 0;
    int still_pending = 0;
  };
  const std::vector<GatherWait>& last_gather_waits() const { return last_gather_waits_; }

 private:
  friend class GradReadyHook;
  MixedPrecisionOptimizer(const OptimizerConfig& config, const OptimizerParallelConfig& parallel);
  struct Candidate;
  struct FlatLayout;
  // Init's steps, in order (optimizer.cc says what each fills).
  absl::Status Init(torch::nn::Module& model);
  absl::StatusOr<std::vector<Candidate>> CollectParameters(torch::nn::Module& model) const;
  absl::Status ChooseGradientPlacement(c10::ScalarType dtype, c10::Device device, int dp_size);
  absl::StatusOr<FlatLayout> LayOutFlatBuffers(std::vector<Candidate> candidates,
                                               c10::ScalarType dtype, c10::Device device,
                                               int64_t bucket_align);
  void AssignSegments(const FlatLayout& layout, bool shard);
  void AllocateBuffers(int64_t total, c10::ScalarType dtype, c10::Device device);
  void SetUpReducer(FlatLayout& layout, bool shard, c10::Device device);  // takes its buckets
  absl::Status AssignModelChunks();
  void OrderParameterGathers(size_t num_buckets);
  // OptimizerConfig::overlap_update: the update stream and each segment's forward part, where
  // the overlap applies.
  absl::Status SetUpUpdateStream(c10::Device device);
  absl::Status WaitForGathers();
  absl::Status InstallGradReadyHooks();
  void SyncGradViews();
  void ReleaseGrads();
  // The gradients of [s.flat_begin, +s.numel): a view of the gradient buffer or, with
  // per-parameter gradients, of the slot's .grad (zeros when it has none).
  torch::Tensor GradView(const Segment& s) const;
  // The buffer DP reduces and the update reads: master_grad_ or model_grad_flat_.
  const torch::Tensor& GradBuffer() const {
    return has_fp32_master_grads() ? master_grad_ : model_grad_flat_;
  }
  // Adds (or, first in a step, copies) [begin, end) of the model-dtype gradients into the fp32
  // master gradients.
  void FoldIntoMaster(int64_t begin, int64_t end);
  void OnGradReady(size_t slot);
  // Starts bucket `b`'s reduction, first folding it into the master gradients when `fold`
  // (a hook during the last micro-batch's backward) and not done yet.
  void StartBucket(size_t b, bool fold);
  // config_.fused_adamw where the kernels of worker/kernels/adamw.h are built and the master
  // weights are fp32 on CUDA.
  bool UsesFusedKernels() const;
  // The norm's pieces: every gradient in the norm (counted) or only in its inf/NaN check.
  std::vector<kernels::GradPiece> NormPieces() const;
  torch::Tensor LocalSumOfSquares();
  absl::Status AllReduceSum(torch::Tensor& value);
  // Pieces of the local segments, each at most `limit` elements (one piece per segment when
  // limit <= 0), grouped into chunks of at most `limit` elements.
  struct Piece {
    Segment segment;     // the piece itself (a part of a segment)
    int64_t temp_begin;  // offset in the conversion temporary
  };
  std::vector<std::vector<Piece>> Chunks(int64_t limit) const;
  // Calls `update(segment, g)` for every piece of Chunks(limit), in order, with g the piece's
  // gradient unscaled (times `grad_scale`, non-finite values 0) in the master dtype: the master
  // gradient itself, or a converted copy of the 16-bit one in a chunk-sized scratch buffer.
  // g is scratch space to `update`. Shared by the unfused updates so they read the gradient
  // the same way, op for op.
  void ForEachUnscaledGradient(int64_t limit, const torch::Tensor& grad_scale,
                               const std::function<void(const Segment&, torch::Tensor&)>& update);
  void AdamWUpdate(double lr, const torch::Tensor& scale, const torch::Tensor& found_inf);
  // The update and the model's copy in one kernel (UsesFusedKernels); false when it does not
  // run here (the caller falls back and copies the model).
  bool KernelAdamWUpdate(double lr, const torch::Tensor& grad_divisor,
                         const torch::Tensor& found_inf);
  void SgdUpdate(double lr, const torch::Tensor& scale, const torch::Tensor& found_inf);
  torch::Tensor MasterView(const Segment& s) const;

  OptimizerConfig config_;
  OptimizerParallelConfig parallel_;
  std::vector<ParamSlot> slots_;
  std::vector<Segment> segments_;
  // Ranges of the gradient buffer (flat) in this rank's norm, and the ones left out of it
  // (only their inf/NaN counts), both inside the segments.
  std::vector<std::pair<int64_t, int64_t>> norm_ranges_;
  std::vector<std::pair<int64_t, int64_t>> excluded_ranges_;
  int64_t num_parameters_ = 0;  // without padding
  bool master_is_model_ = false;
  bool needs_conversion_ = false;        // the update reads 16-bit gradients
  bool per_param_grads_ = false;         // no gradient buffer: autograd's own .grad (file comment)
  torch::Tensor model_flat_;             // the model's dtype; parameters are views
  torch::Tensor model_grad_flat_;        // the model's dtype; .grad are views
  bool master_grad_holds_step_ = false;  // master_grad_ has this step's gradients so far
  torch::Tensor master_;                 // fp32 (fp64 for an fp64 model); == model_flat_ when fp32
  torch::Tensor master_grad_;
  torch::Tensor exp_avg_;
  torch::Tensor exp_avg_sq_;
  torch::Tensor momentum_;
  torch::Tensor step_;       // Adam's t, 0-dim fp32 on the device
  int64_t state_numel_ = 0;  // elements of the local state buffers

  // Data parallelism.
  std::unique_ptr<parallel::GradReducer> reducer_;
  std::vector<size_t> slot_bucket_;  // bucket of each slot
  std::vector<std::vector<size_t>> bucket_slots_;
  std::mutex hook_mu_;             // the hooks run on autograd threads
  bool armed_ = false;             // some chunk's last backward has begun this step
  std::vector<bool> chunk_armed_;  // its last backward has begun (its hooks count)
  std::vector<int> slot_chunk_;    // OptimizerParallelConfig::model_chunk
  std::vector<bool> slot_ready_;
  std::vector<bool> slot_late_;         // OptimizerParallelConfig::late_gradient
  std::vector<size_t> bucket_pending_;  // slots not ready yet
  std::vector<bool> bucket_folded_;     // folded into master this micro-batch
  std::vector<bool> bucket_started_;    // its reduction is running: nothing folds into it
  size_t next_bucket_ = 0;              // buckets [0, next) are started
  size_t started_in_backward_ = 0;
  bool reduced_ = false;  // this step's reduction is complete
  bool unfolded_ = true;  // the model-dtype buffer may hold gradients not folded into master
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;
  std::vector<uintptr_t> hook_keys_;
  // overlap_param_gather with forward_part: buckets in the order Step starts their gathers
  // (by the first forward part that needs them), that part of each bucket, and how many of
  // gather_order_ the forward has waited for.
  std::vector<size_t> gather_order_;
  std::vector<int64_t> bucket_first_part_;
  size_t gathers_waited_ = 0;
  std::vector<GatherWait> gather_waits_, last_gather_waits_;
  std::vector<std::function<void()>> update_fences_;  // AddUpdateFence, until the next update
  // overlap_update: the stream the update runs on and the forward part of each segment.
  std::unique_ptr<UpdateStream> update_stream_;
  std::vector<int64_t> segment_part_;
};

}  // namespace mt::engine

#endif  // MT_WORKER_ENGINE_OPTIMIZER_H_
