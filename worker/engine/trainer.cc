#include "worker/engine/trainer.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/utils.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

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

// This trainer runs one model replica per rank: no tensor, pipeline or context parallelism;
// data parallelism only with collectives (`dp_size` > 1).
absl::Status CheckSingleDevice(const mt::v1::ParallelSpec& p, int dp_size) {
  auto over_one = [](int64_t v) { return v > 1; };
  if (over_one(p.tensor_model_parallel_size()) || over_one(p.pipeline_model_parallel_size()) ||
      over_one(p.context_parallel_size())) {
    return absl::UnimplementedError(
        absl::StrCat("tensor, pipeline and context parallelism are not available yet: this spec "
                     "has tp=",
                     p.tensor_model_parallel_size(), " pp=", p.pipeline_model_parallel_size(),
                     " cp=", p.context_parallel_size(), "; run it with tp=pp=cp=1"));
  }
  const int64_t dp = p.data_parallel_size() > 0 ? p.data_parallel_size() : p.world_size();
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
  plan.use_distributed_optimizer = spec.parallel().use_distributed_optimizer();
  plan.overlap_grad_reduce = spec.parallel().overlap_grad_reduce();
  plan.overlap_param_gather = spec.parallel().overlap_param_gather();
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

// How the optimizer spreads over the ranks: the spec's DP choices over this rank's groups.
absl::StatusOr<OptimizerParallelConfig> MakeOptimizerParallel(const TrainPlan& plan,
                                                              const TrainerOptions& options) {
  OptimizerParallelConfig p;
  p.groups = options.groups;
  if (plan.data_parallel_size > 1) {
    if (p.groups == nullptr || p.groups->dp().size != plan.data_parallel_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data parallelism over ", plan.data_parallel_size,
          " ranks needs TrainerOptions::groups with a DP group of that size (the optimizer "
          "reduces the gradients over it); run it as a job (mtctl submit)"));
    }
  }
  p.use_distributed_optimizer = plan.use_distributed_optimizer;
  p.overlap_grad_reduce = plan.overlap_grad_reduce;
  p.overlap_param_gather = plan.overlap_param_gather;
  p.bucket_elements = plan.ddp_bucket_elements;
  return p;
}

}  // namespace

// The statistics of the steps since the last read, kept on the device so that a step does not
// wait for it (Trainer::SyncStepMetrics reads them).
struct DeviceStepStats {
  torch::Tensor loss_sum;    // losses of the steps not skipped
  torch::Tensor loss_count;  // steps not skipped
  torch::Tensor skipped;     // steps skipped
  torch::Tensor last_loss;
  torch::Tensor last_norm;
  torch::Tensor last_found_inf;

  void Add(const torch::Tensor& loss, const OptimizerStepResult& r) {
    torch::NoGradGuard no_grad;
    const torch::Tensor found_inf = r.found_inf_tensor().to(torch::kDouble);
    const torch::Tensor keep = 1.0 - found_inf;
    const torch::Tensor l = loss.to(torch::kDouble);
    // A skipped step's loss may be inf/NaN: where(), not a multiplication by 0.
    const torch::Tensor kept_loss = torch::where(keep > 0, l, torch::zeros_like(l));
    if (!loss_sum.defined()) {
      loss_sum = kept_loss;
      loss_count = keep;
      skipped = found_inf;
    } else {
      loss_sum = loss_sum + kept_loss;
      loss_count = loss_count + keep;
      skipped = skipped + found_inf;
    }
    last_loss = l;
    last_norm = r.grad_norm_tensor().to(torch::kDouble);
    last_found_inf = found_inf;
  }

  struct Values {
    double loss_sum = 0, loss_count = 0, skipped = 0, loss = 0, grad_norm = 0, found_inf = 0;
  };
  // One copy from the device for all of them; resets the sums.
  Values Take() {
    const torch::Tensor host =
        torch::stack({loss_sum, loss_count, skipped, last_loss, last_norm, last_found_inf})
            .to(torch::kCPU);
    const double* v = host.data_ptr<double>();
    loss_sum = loss_count = skipped = torch::Tensor();
    return Values{v[0], v[1], v[2], v[3], v[4], v[5]};
  }
};

struct Trainer::State {
  torch::Device device = torch::Device(torch::kCPU);
  c10::ScalarType dtype = torch::kFloat;
  std::shared_ptr<model::GptModel> model;
  std::unique_ptr<MixedPrecisionOptimizer> optimizer;
  DeviceStepStats stats;

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
    if (device.is_cuda()) {
      // A copy from pageable memory waits for the GPU's queue to drain; from pinned memory (the
      // caching host allocator keeps it alive until the copy is done) it does not, so the step
      // can queue its work ahead of the GPU.
      return host.pin_memory().to(device, torch::kLong, /*non_blocking=*/true);
    }
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

model::GptModel& Trainer::model() {
  if (absl::Status s = state_->optimizer->WaitForParameters(); !s.ok()) {
    MT_LOG(ERROR) << "waiting for the parameter all-gather: " << s;
  }
  return *state_->model;
}
MixedPrecisionOptimizer& Trainer::optimizer() { return *state_->optimizer; }
MemoryStats Trainer::memory() const { return ReadMemoryStats(state_->device); }

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const mt::v1::JobSpec& spec,
                                                         const TrainerOptions& options,
                                                         std::unique_ptr<BatchSource> train_data,
                                                         std::unique_ptr<BatchSource> valid_data) {
  if (train_data == nullptr) return absl::InvalidArgumentError("no training data source");
  const int dp_size = options.collectives != nullptr ? options.collectives->dp_size() : 1;
  MT_RETURN_IF_ERROR(CheckSingleDevice(spec.parallel(), dp_size));
  MT_ASSIGN_OR_RETURN(TrainPlan plan, MakePlan(spec, dp_size));
  MT_ASSIGN_OR_RETURN(model::GptConfig config, model::GptConfig::FromSpec(spec));
  MT_ASSIGN_OR_RETURN(config.attention_backend, ParseBackend(options.attention_backend));
  MT_ASSIGN_OR_RETURN(LrSchedule schedule,
                      LrSchedule::FromSpec(spec.training(), plan.global_batch_size));
  MT_ASSIGN_OR_RETURN(LossScaler scaler, options.force_dynamic_loss_scaling
                                             ? LossScaler::DynamicFromSpec(spec.training())
                                             : LossScaler::FromSpec(spec.training()));
  MT_ASSIGN_OR_RETURN(OptimizerConfig opt_config, OptimizerConfig::FromSpec(spec.training()));
  opt_config.num_micro_batches = plan.num_micro_batches;
  MT_ASSIGN_OR_RETURN(OptimizerParallelConfig opt_parallel, MakeOptimizerParallel(plan, options));
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
    torch::manual_seed(plan.seed);
    MT_ASSIGN_OR_RETURN(s.model, model::GptModel::Create(config));
    s.model->to(device, dtype);
    s.model->train();
    MT_ASSIGN_OR_RETURN(s.optimizer,
                        MixedPrecisionOptimizer::Create(opt_config, *s.model, opt_parallel));
    return absl::OkStatus();
  }));
  if (options.log_progress) {
    MT_LOG(INFO) << "trainer: " << s.model->config().DebugString() << "; " << plan.num_parameters
                 << " parameters; " << plan.precision << " on " << device.str() << "; micro-batch "
                 << plan.micro_batch_size << " x " << plan.num_micro_batches << " = global batch "
                 << plan.global_batch_size << "; " << plan.train_iterations << " iterations; lr "
                 << trainer->schedule_.config().DebugString();
    if (plan.data_parallel_size > 1) {
      MT_LOG(INFO) << "trainer: dp " << plan.data_parallel_size << ", "
                   << s.optimizer->buckets().size()
                   << " gradient bucket(s) of <= " << plan.ddp_bucket_elements << " elements"
                   << (plan.use_distributed_optimizer ? ", distributed optimizer" : "")
                   << (plan.overlap_grad_reduce ? ", overlapped reduction" : "")
                   << (plan.overlap_param_gather ? ", overlapped parameter gather" : "");
    }
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
  MT_RETURN_IF_ERROR(s.optimizer->ZeroGrad());
  torch::Tensor loss_sum;
  double data_seconds = 0.0;
  for (int64_t m = 0; m < num_micro; ++m) {
    const Clock::time_point data_start = Clock::now();
    MT_ASSIGN_OR_RETURN(TokenBatch batch, train_data_->Next(rows));
    data_seconds += SecondsSince(data_start);
    MT_ASSIGN_OR_RETURN(torch::Tensor sample, s.ToDevice(batch, rows, cols, vocab_size_));
    torch::Tensor loss = s.model->LossOnSample(sample);
    s.optimizer->BeginMicroBatch(/*last=*/m == num_micro - 1);
    (loss * (loss_scale / static_cast<double>(num_micro))).backward();
    s.optimizer->FinishMicroBatch();
    loss_sum = m == 0 ? loss.detach() : loss_sum + loss.detach();
  }

  // 4. Reduce the gradients over DP (started during the last backward with
  //    overlap_grad_reduce), unscale, check for inf/NaN, clip, update: all on the device.
  MT_ASSIGN_OR_RETURN(const OptimizerStepResult result, s.optimizer->Step(lr, loss_scale));
  s.stats.Add(loss_sum / static_cast<double>(num_micro), result);

  // 5. Bookkeeping; the device is waited for only where the values are needed.
  ++iteration_;
  consumed_samples_ += plan_.global_batch_size;
  StepMetrics m;
  m.iteration = iteration_;
  m.train_iterations = plan_.train_iterations;
  m.loss = m.grad_norm = m.interval_loss = std::nan("");
  const bool dynamic_scaling = scaler_.config().kind == LossScalerConfig::Kind::kDynamic;
  if (options_.sync_every_step || dynamic_scaling || IsLogStep(iteration_)) {
    MT_RETURN_IF_ERROR(SyncStepMetrics(&m));
  }
  scaler_.Update(m.skipped);  // only the dynamic scaler reads it, and then it is synced
  m.learning_rate = lr;
  m.loss_scale = loss_scale;
  m.skipped_total = skipped_total_;
  m.tokens = plan_.global_batch_size * plan_.seq_length;
  m.consumed_samples = consumed_samples_;
  m.seconds = SecondsSince(start);
  m.data_seconds = data_seconds;
  m.tokens_per_second = m.seconds > 0 ? static_cast<double>(m.tokens) / m.seconds : 0.0;
  m.mfu = model::ModelFlopsUtilization(m.tokens_per_second, plan_.flops_per_token,
                                       options_.peak_flops_per_second);
  if (IsLogStep(iteration_) && interval_.loss_count > 0) {
    m.interval_loss = interval_.loss_sum / static_cast<double>(interval_.loss_count);
  }
  LogStep(m);
  return m;
}

absl::Status Trainer::SyncStepMetrics(StepMetrics* m) {
  const DeviceStepStats::Values v = state_->stats.Take();
  double loss = v.loss, loss_sum = v.loss_sum;
  parallel::Collectives* dp = options_.collectives;
  if (dp != nullptr && dp->dp_size() > 1) {
    // Skips are the same on every DP rank (the norm is global): the means of the sums are the
    // sums of the means.
    MT_ASSIGN_OR_RETURN(loss, dp->AverageScalar(loss));
    MT_ASSIGN_OR_RETURN(loss_sum, dp->AverageScalar(loss_sum));
  }
  skipped_total_ += static_cast<int64_t>(v.skipped);
  interval_.skipped += static_cast<int64_t>(v.skipped);
  interval_.loss_sum += loss_sum;
  interval_.loss_count += static_cast<int64_t>(v.loss_count);
  m->synced = true;
  m->loss = loss;
  m->grad_norm = v.grad_norm;
  m->skipped = v.found_inf != 0.0;
  return absl::OkStatus();
}

void Trainer::LogStep(const StepMetrics& m) {
  total_seconds_ += m.seconds;
  interval_.steps += 1;
  interval_.tokens += m.tokens;
  interval_.seconds += m.seconds;
  if (!IsLogStep(m.iteration)) return;
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
  MT_RETURN_IF_ERROR(s.optimizer->WaitForParameters());
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
