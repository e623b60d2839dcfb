#include "worker/engine/trainer.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/utils.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/spec/defaults.h"
#include "mt/v1/job_spec.pb.h"
#include "worker/engine/optimizer.h"
#include "worker/model/gpt.h"
#include "worker/model/gpt_config.h"
#include "worker/parallel/collectives.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/tensor_parallel.h"

#if defined(MT_ENGINE_WITH_CUDA) && MT_ENGINE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace mt::engine {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The RNG seed of one step: a function of (seed, iteration) only, so a run's dropout masks do
// not depend on what ran before (evaluation, a restart from a checkpoint).
uint64_t StepSeed(uint64_t seed, int64_t iteration) {
  return SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(iteration) + 1));
}

// LibTorch's exceptions end here (DESIGN.md §8.1).
absl::Status FromException(const std::exception& e, absl::string_view what) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory: ", e.what()));
  }
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return absl::InternalError(absl::StrCat(what, ": ", c10_error->what_without_backtrace()));
  }
  return absl::InternalError(absl::StrCat(what, ": ", e.what()));
}

template <typename F>
auto CatchTorch(absl::string_view what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return FromException(e, what);
  }
}

absl::StatusOr<torch::Device> ParseDevice(const std::string& name) {
  absl::StatusOr<torch::Device> parsed =
      CatchTorch("device", [&]() -> absl::StatusOr<torch::Device> { return torch::Device(name); });
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", name, "\" is not cpu, cuda or cuda:N"));
  }
  torch::Device d = *parsed;
  if (d.is_cpu()) return torch::Device(torch::kCPU);
  if (!d.is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat("device \"", name, "\": only cpu and cuda"));
  }
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        absl::StrCat("device \"", name, "\": this LibTorch/machine has no CUDA device"));
  }
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  const int64_t index = d.has_index() ? d.index() : 0;
  if (index >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("device \"", name, "\": only ", count, " CUDA devices"));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

absl::StatusOr<model::AttentionBackend> ParseBackend(const std::string& name) {
  if (name == "auto" || name.empty()) return model::AttentionBackend::kAuto;
  if (name == "math") return model::AttentionBackend::kMath;
  if (name == "fused") return model::AttentionBackend::kFused;
  return absl::InvalidArgumentError(
      absl::StrCat("attention backend \"", name, "\" is not auto, math or fused"));
}

// This trainer runs tensor parallelism (over the TP group of TrainerOptions::groups) and data
// parallelism (with collectives, `dp_size` > 1); no pipeline or context parallelism.
absl::Status CheckSingleDevice(const mt::v1::ParallelSpec& p, int dp_size, int tp_group_size) {
  auto over_one = [](int64_t v) { return v > 1; };
  if (over_one(p.pipeline_model_parallel_size()) || over_one(p.context_parallel_size())) {
    return absl::UnimplementedError(
        absl::StrCat("pipeline and context parallelism are not available yet: this spec has pp=",
                     p.pipeline_model_parallel_size(), " cp=", p.context_parallel_size(),
                     "; run it with pp=cp=1"));
  }
  const int64_t tp = std::max<int64_t>(1, p.tensor_model_parallel_size());
  if (tp != tp_group_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the spec asks for tp=", tp, " but this trainer's tensor-parallel group has ",
                     tp_group_size, " rank(s); run it as a job (mtctl submit) for tp > 1"));
  }
  const int64_t dp = p.data_parallel_size() > 0 ? p.data_parallel_size() : p.world_size() / tp;
  if (over_one(dp) && dp != dp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the spec asks for dp=", dp, " but this trainer has ", dp_size,
                     " data-parallel rank(s); run it as a job (mtctl submit) for dp > 1"));
  }
  if (p.num_layers_per_virtual_pipeline_stage() > 0) {
    return absl::InvalidArgumentError(
        "parallel.num_layers_per_virtual_pipeline_stage needs pipeline parallelism");
  }
  return absl::OkStatus();
}

// This rank's part of the model: its tensor-parallel shard (options.groups; the whole model
// without groups), every layer.
model::ModelShard ModelShardOf(const TrainerOptions& options, const mt::v1::ParallelSpec& p) {
  model::ModelShard shard;
  if (options.groups != nullptr) {
    const parallel::GroupHandle& tp = options.groups->tp();
    shard.tp_size = tp.size;
    shard.tp_rank = tp.rank;
    // Shares ownership of the groups: the model's autograd graphs use the TP group.
    shard.tp_group = std::shared_ptr<const parallel::GroupHandle>(options.groups, &tp);
  }
  shard.sequence_parallel = p.sequence_parallel() && shard.tp_size > 1;
  return shard;
}

// Megatron's allreduce_layernorm_grads: under sequence parallelism each TP rank computed the
// gradients of the replicated parameters (LayerNorms, row-parallel biases, the position
// embedding) from its part of the sequence only. Sums them over the TP group, in the
// optimizer's gradient buffer (where this step's gradients have accumulated).
absl::Status AllReduceSequenceParallelGradients(model::GptModel& model,
                                                MixedPrecisionOptimizer& optimizer) {
  const std::vector<std::string> names = model.SequenceParallelParameterNames();
  if (names.empty()) return absl::OkStatus();
  const std::set<std::string> wanted(names.begin(), names.end());
  // One bucket: the whole buffer, laid out by the slots' offsets.
  const torch::Tensor buffer =
      optimizer.GradientBuckets(std::numeric_limits<int64_t>::max()).front();
  std::vector<torch::Tensor> grads;
  for (const MixedPrecisionOptimizer::ParamSlot& slot : optimizer.slots()) {
    if (wanted.count(slot.name) > 0) grads.push_back(buffer.narrow(0, slot.offset, slot.numel));
  }
  return parallel::AllReduceCoalesced(grads, model.shard().group());
}

absl::StatusOr<TrainPlan> MakePlan(const mt::v1::JobSpec& spec, int64_t dp) {
  const mt::v1::TrainingSpec& t = spec.training();
  TrainPlan plan;
  plan.micro_batch_size = t.micro_batch_size();
  if (plan.micro_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.micro_batch_size ", t.micro_batch_size(), " must be >= 1"));
  }
  plan.global_batch_size =
      t.global_batch_size() > 0 ? t.global_batch_size() : t.micro_batch_size() * dp;
  if (plan.global_batch_size % (plan.micro_batch_size * dp) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.global_batch_size ", plan.global_batch_size,
                     " is not a multiple of micro_batch_size ", plan.micro_batch_size,
                     " * data-parallel size ", dp));
  }
  plan.num_micro_batches = plan.global_batch_size / (plan.micro_batch_size * dp);
  plan.data_parallel_size = dp;
  if (spec.parallel().ddp_bucket_size() > 0) {
    plan.ddp_bucket_elements = spec.parallel().ddp_bucket_size();
  }
  plan.seq_length = spec.model().seq_length();
  if (t.train_iters() > 0 && t.train_samples() > 0) {
    return absl::InvalidArgumentError(
        "training: set one of train_iters and train_samples, not both");
  }
  if (t.train_iters() > 0) {
    plan.train_iterations = t.train_iters();
  } else if (t.train_samples() > 0) {
    plan.train_iterations = t.train_samples() / plan.global_batch_size;  // Megatron rounds down
  } else {
    return absl::InvalidArgumentError(
        "training: set train_iters (--train-iters) or train_samples (--train-samples)");
  }
  const mt::v1::EvaluationSpec& e = spec.evaluation();
  plan.eval_interval = e.has_eval_interval() ? e.eval_interval() : spec::kDefaultEvalInterval;
  plan.eval_iterations = e.has_eval_iters() ? e.eval_iters() : spec::kDefaultEvalIters;
  if (plan.eval_interval < 0 || plan.eval_iterations < 0) {
    return absl::InvalidArgumentError("evaluation.eval_interval and eval_iters must be >= 0");
  }
  plan.log_interval =
      spec.logging().has_log_interval() ? spec.logging().log_interval() : spec::kDefaultLogInterval;
  if (plan.log_interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("logging.log_interval ", plan.log_interval, " must be >= 1"));
  }
  plan.seed = t.has_seed() ? t.seed() : spec::kDefaultSeed;
  return plan;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm%02ds", s / 3600, s / 60 % 60, s % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

std::string FormatBytes(double bytes) {
  return absl::StrFormat("%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

MemoryStats ReadMemoryStats(const torch::Device& device) {
  MemoryStats m;
#if defined(MT_ENGINE_WITH_CUDA) && MT_ENGINE_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    m.is_cuda = true;
    m.allocated_bytes = stats.allocated_bytes[0].current;
    m.peak_allocated_bytes = stats.allocated_bytes[0].peak;
    m.reserved_bytes = stats.reserved_bytes[0].current;
    return m;
  }
#endif
  (void)device;
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return m;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  if (n != 2) return m;
  m.allocated_bytes = static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
  m.peak_allocated_bytes = m.allocated_bytes;
  m.reserved_bytes = m.allocated_bytes;
  return m;
}

// "mem 1.23 GiB (host RSS)" or "mem 10.10 GiB (peak 12.00 GiB, reserved 14.00 GiB)".
std::string MemoryString(const MemoryStats& m) {
  if (!m.is_cuda) {
    return absl::StrCat("mem ", FormatBytes(static_cast<double>(m.allocated_bytes)), " (host RSS)");
  }
  return absl::StrFormat("mem %s (peak %s, reserved %s)",
                         FormatBytes(static_cast<double>(m.allocated_bytes)),
                         FormatBytes(static_cast<double>(m.peak_allocated_bytes)),
                         FormatBytes(static_cast<double>(m.reserved_bytes)));
}

}  // namespace

struct Trainer::State {
  torch::Device device = torch::Device(torch::kCPU);
  c10::ScalarType dtype = torch::kFloat;
  std::shared_ptr<model::GptModel> model;
  std::unique_ptr<MixedPrecisionOptimizer> optimizer;

  // One batch from the source onto the device, checked.
  absl::StatusOr<torch::Tensor> ToDevice(const TokenBatch& batch, int64_t rows, int64_t cols,
                                         int64_t vocab_size) const {
    if (batch.rows != rows || batch.cols != cols ||
        static_cast<int64_t>(batch.tokens.size()) != rows * cols) {
      return absl::InvalidArgumentError(absl::StrCat("data: batch of ", batch.rows, "x", batch.cols,
                                                     " (", batch.tokens.size(), " tokens), want ",
                                                     rows, "x", cols));
    }
    for (size_t i = 0; i < batch.tokens.size(); ++i) {
      const int64_t tok = batch.tokens[i];
      if (tok < 0 || tok >= vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("data: token ", tok, " at position ", i,
                                                       " is outside the vocabulary [0, ",
                                                       vocab_size, ")"));
      }
    }
    const torch::Tensor host =
        torch::from_blob(const_cast<int64_t*>(batch.tokens.data()), {rows, cols}, torch::kLong);
    return host.to(device, torch::kLong, /*non_blocking=*/false, /*copy=*/true);
  }
};

Trainer::Trainer(TrainPlan plan, LrSchedule schedule, LossScaler scaler, TrainerOptions options,
                 std::unique_ptr<BatchSource> train_data, std::unique_ptr<BatchSource> valid_data)
    : plan_(std::move(plan)),
      schedule_(std::move(schedule)),
      scaler_(std::move(scaler)),
      options_(std::move(options)),
      train_data_(std::move(train_data)),
      valid_data_(std::move(valid_data)),
      state_(std::make_unique<State>()) {}

Trainer::~Trainer() = default;

model::GptModel& Trainer::model() { return *state_->model; }
MixedPrecisionOptimizer& Trainer::optimizer() { return *state_->optimizer; }
MemoryStats Trainer::memory() const { return ReadMemoryStats(state_->device); }

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const mt::v1::JobSpec& spec,
                                                         const TrainerOptions& options,
                                                         std::unique_ptr<BatchSource> train_data,
                                                         std::unique_ptr<BatchSource> valid_data) {
  if (train_data == nullptr) return absl::InvalidArgumentError("no training data source");
  const int dp_size = options.collectives != nullptr ? options.collectives->dp_size() : 1;
  const int tp_size = options.groups != nullptr ? options.groups->tp().size : 1;
  MT_RETURN_IF_ERROR(CheckSingleDevice(spec.parallel(), dp_size, tp_size));
  MT_ASSIGN_OR_RETURN(TrainPlan plan, MakePlan(spec, dp_size));
  MT_ASSIGN_OR_RETURN(model::GptConfig config, model::GptConfig::FromSpec(spec));
  MT_ASSIGN_OR_RETURN(config.attention_backend, ParseBackend(options.attention_backend));
  MT_ASSIGN_OR_RETURN(LrSchedule schedule,
                      LrSchedule::FromSpec(spec.training(), plan.global_batch_size));
  MT_ASSIGN_OR_RETURN(LossScaler scaler, options.force_dynamic_loss_scaling
                                             ? LossScaler::DynamicFromSpec(spec.training())
                                             : LossScaler::FromSpec(spec.training()));
  MT_ASSIGN_OR_RETURN(OptimizerConfig opt_config, OptimizerConfig::FromSpec(spec.training()));
  MT_ASSIGN_OR_RETURN(torch::Device device, ParseDevice(options.device));

  c10::ScalarType dtype = torch::kFloat;
  switch (spec.training().precision()) {
    case mt::v1::PRECISION_BF16:
      dtype = torch::kBFloat16;
      plan.precision = "bf16";
      break;
    case mt::v1::PRECISION_FP16:
      dtype = torch::kHalf;
      plan.precision = "fp16";
      if (device.is_cpu()) {
        return absl::InvalidArgumentError(
            "training.precision fp16 needs a GPU (LibTorch has no fp16 matmul on the CPU); use "
            "bf16 or fp32");
      }
      break;
    default:
      plan.precision = "fp32";
  }
  plan.num_parameters = model::CountParameters(config);
  plan.flops_per_token = model::TrainingFlopsPerToken(plan.num_parameters, config.num_layers,
                                                      config.hidden_size, config.seq_length);

  std::unique_ptr<Trainer> trainer(new Trainer(plan, std::move(schedule), std::move(scaler),
                                               options, std::move(train_data),
                                               std::move(valid_data)));
  trainer->vocab_size_ = config.vocab_size;
  State& s = *trainer->state_;
  s.device = device;
  s.dtype = dtype;
  MT_RETURN_IF_ERROR(CatchTorch("building the model", [&]() -> absl::Status {
    model::ModelBuildOptions build;
    build.seed = plan.seed;
    build.device = device;
    build.dtype = dtype;
    MT_ASSIGN_OR_RETURN(
        s.model, model::GptModel::Create(config, ModelShardOf(options, spec.parallel()), build));
    s.model->train();
    MT_ASSIGN_OR_RETURN(s.optimizer, MixedPrecisionOptimizer::Create(opt_config, *s.model));
    return absl::OkStatus();
  }));
  if (options.log_progress) {
    MT_LOG(INFO) << "trainer: " << s.model->config().DebugString() << "; " << plan.num_parameters
                 << " parameters; " << plan.precision << " on " << device.str() << "; micro-batch "
                 << plan.micro_batch_size << " x " << plan.num_micro_batches << " = global batch "
                 << plan.global_batch_size << "; " << plan.train_iterations << " iterations; lr "
                 << trainer->schedule_.config().DebugString();
  }
  return trainer;
}

void SetCpuThreads(int threads) {
  if (threads > 0) at::set_num_threads(threads);
}

absl::StatusOr<StepMetrics> Trainer::Step() {
  return CatchTorch(absl::StrCat("training step ", iteration_ + 1), [this] { return StepImpl(); });
}

absl::StatusOr<StepMetrics> Trainer::StepImpl() {
  State& s = *state_;
  const Clock::time_point start = Clock::now();
  const int64_t rows = plan_.micro_batch_size;
  const int64_t cols = plan_.seq_length + 1;
  const int64_t num_micro = plan_.num_micro_batches;

  // 1. This step's learning rate and loss scale.
  const double lr = schedule_.LearningRate(consumed_samples_);
  const double loss_scale = scaler_.scale();

  // 2. Dropout masks from (seed, iteration) only.
  torch::manual_seed(StepSeed(plan_.seed, iteration_));

  // 3. Forward and backward over the micro-batches; gradients accumulate.
  s.model->train();
  s.optimizer->ZeroGrad();
  torch::Tensor loss_sum;
  double data_seconds = 0.0;
  for (int64_t m = 0; m < num_micro; ++m) {
    const Clock::time_point data_start = Clock::now();
    MT_ASSIGN_OR_RETURN(TokenBatch batch, train_data_->Next(rows));
    data_seconds += SecondsSince(data_start);
    MT_ASSIGN_OR_RETURN(torch::Tensor sample, s.ToDevice(batch, rows, cols, vocab_size_));
    torch::Tensor loss = s.model->LossOnSample(sample);
    (loss * (loss_scale / static_cast<double>(num_micro))).backward();
    s.optimizer->FinishMicroBatch();
    loss_sum = m == 0 ? loss.detach() : loss_sum + loss.detach();
  }

  // 4. Sequence parallelism: sum the replicated parameters' partial gradients over TP. Then
  //    data parallelism: average the step's gradients over the DP group, so every replica
  //    applies the same update (and sees the same inf/NaN).
  MT_RETURN_IF_ERROR(AllReduceSequenceParallelGradients(*s.model, *s.optimizer));
  parallel::Collectives* dp = options_.collectives;
  if (dp != nullptr && dp->dp_size() > 1) {
    MT_RETURN_IF_ERROR(
        dp->AverageGradients(s.optimizer->GradientBuckets(plan_.ddp_bucket_elements)));
  }

  // 5. Unscale, check for inf/NaN, clip, update; then move the loss scale.
  const OptimizerStepResult result = s.optimizer->Step(lr, loss_scale);
  scaler_.Update(result.skipped);

  // 6. Bookkeeping.
  ++iteration_;
  consumed_samples_ += plan_.global_batch_size;
  if (result.skipped) ++skipped_total_;
  StepMetrics m;
  m.iteration = iteration_;
  m.train_iterations = plan_.train_iterations;
  m.loss = loss_sum.item<double>() / static_cast<double>(num_micro);
  if (dp != nullptr && dp->dp_size() > 1) {
    MT_ASSIGN_OR_RETURN(m.loss, dp->AverageScalar(m.loss));
  }
  m.learning_rate = lr;
  m.grad_norm = result.grad_norm;
  m.loss_scale = loss_scale;
  m.skipped = result.skipped;
  m.skipped_total = skipped_total_;
  m.tokens = plan_.global_batch_size * plan_.seq_length;
  m.consumed_samples = consumed_samples_;
  m.seconds = SecondsSince(start);
  m.data_seconds = data_seconds;
  m.tokens_per_second = m.seconds > 0 ? static_cast<double>(m.tokens) / m.seconds : 0.0;
  m.mfu = model::ModelFlopsUtilization(m.tokens_per_second, plan_.flops_per_token,
                                       options_.peak_flops_per_second);
  LogStep(m);
  return m;
}

void Trainer::LogStep(const StepMetrics& m) {
  total_seconds_ += m.seconds;
  interval_.steps += 1;
  interval_.tokens += m.tokens;
  interval_.seconds += m.seconds;
  if (m.skipped) {
    interval_.skipped += 1;
  } else {
    interval_.loss_sum += m.loss;
    interval_.loss_count += 1;
  }
  if (m.iteration % plan_.log_interval != 0 && m.iteration != plan_.train_iterations) return;
  if (options_.log_progress) {
    const double step_seconds = interval_.seconds / static_cast<double>(interval_.steps);
    const double tokens_per_second =
        interval_.seconds > 0 ? static_cast<double>(interval_.tokens) / interval_.seconds : 0.0;
    const double loss = interval_.loss_count > 0
                            ? interval_.loss_sum / static_cast<double>(interval_.loss_count)
                            : std::nan("");
    const double mfu = model::ModelFlopsUtilization(tokens_per_second, plan_.flops_per_token,
                                                    options_.peak_flops_per_second);
    const int64_t remaining = std::max<int64_t>(0, plan_.train_iterations - m.iteration);
    MT_LOG(INFO) << absl::StrFormat(
        "step %d/%d | loss %.4f | lr %.3e | grad norm %.3f | loss scale %g | skipped %d | "
        "%.0f tokens/s | %.1f ms/step | MFU %s | %s | ETA %s",
        m.iteration, m.train_iterations, loss, m.learning_rate, m.grad_norm, m.loss_scale,
        interval_.skipped, tokens_per_second, step_seconds * 1e3,
        options_.peak_flops_per_second > 0 ? absl::StrFormat("%.1f%%", mfu * 100) : "-",
        MemoryString(memory()), FormatDuration(step_seconds * remaining));
  }
  interval_ = Interval();
}

absl::StatusOr<EvalMetrics> Trainer::Evaluate() {
  return CatchTorch("evaluation", [this] { return EvaluateImpl(); });
}

absl::StatusOr<EvalMetrics> Trainer::EvaluateImpl() {
  if (valid_data_ == nullptr) return absl::FailedPreconditionError("no validation data");
  State& s = *state_;
  const Clock::time_point start = Clock::now();
  const int64_t rows = plan_.micro_batch_size;
  const int64_t cols = plan_.seq_length + 1;
  const int64_t batches = plan_.eval_iterations;
  EvalMetrics out;
  out.iteration = iteration_;
  out.batches = batches;
  if (batches == 0) return out;
  s.model->eval();
  torch::Tensor loss_sum;
  {
    torch::NoGradGuard no_grad;
    for (int64_t i = 0; i < batches * plan_.num_micro_batches; ++i) {
      MT_ASSIGN_OR_RETURN(TokenBatch batch, valid_data_->Next(rows));
      MT_ASSIGN_OR_RETURN(torch::Tensor sample, s.ToDevice(batch, rows, cols, vocab_size_));
      torch::Tensor loss = s.model->LossOnSample(sample);
      loss_sum = i == 0 ? loss : loss_sum + loss;
    }
  }
  s.model->train();
  out.loss = loss_sum.item<double>() / static_cast<double>(batches * plan_.num_micro_batches);
  if (options_.collectives != nullptr && options_.collectives->dp_size() > 1) {
    MT_ASSIGN_OR_RETURN(out.loss, options_.collectives->AverageScalar(out.loss));
  }
  out.perplexity = std::exp(std::min(20.0, out.loss));
  out.seconds = SecondsSince(start);
  if (options_.log_progress) {
    MT_LOG(INFO) << absl::StrFormat(
        "validation at step %d | loss %.4f | perplexity %.3f | %d batches | %.1f s", iteration_,
        out.loss, out.perplexity, batches, out.seconds);
  }
  return out;
}

absl::Status Trainer::Train(const std::function<bool(const StepMetrics&)>& on_step,
                            const std::function<void(const EvalMetrics&)>& on_eval) {
  const bool evaluate =
      valid_data_ != nullptr && plan_.eval_interval > 0 && plan_.eval_iterations > 0;
  int64_t last_eval = -1;
  auto run_eval = [&]() -> absl::Status {
    MT_ASSIGN_OR_RETURN(EvalMetrics e, Evaluate());
    last_eval = iteration_;
    if (on_eval) on_eval(e);
    return absl::OkStatus();
  };
  while (iteration_ < plan_.train_iterations) {
    MT_ASSIGN_OR_RETURN(StepMetrics m, Step());
    if (on_step && !on_step(m)) return absl::OkStatus();
    if (evaluate && iteration_ % plan_.eval_interval == 0) MT_RETURN_IF_ERROR(run_eval());
  }
  if (evaluate && last_eval != iteration_) MT_RETURN_IF_ERROR(run_eval());
  return absl::OkStatus();
}

}  // namespace mt::engine
