#include "worker/train/rank_command.h"

#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/rpc/auth.h"
#include "google/protobuf/util/time_util.h"
#include "mt/v1/worker_service.pb.h"
#include "worker/agent/report_channel.h"
#include "worker/checkpoint/checkpointer.h"
#include "worker/engine/data_sources.h"
#include "worker/engine/trainer.h"
#include "worker/metrics/rank_observability.h"
#include "worker/parallel/collectives.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/rendezvous_client.h"

namespace mt::train {
namespace {

using google::protobuf::util::TimeUtil;

// Set from the signal handler; the training loop polls it between steps.
std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) { g_stop_signal.store(sig); }

constexpr double kH200PeakBf16 = 989e12;

int Fail(const absl::Status& status, absl::string_view what) {
  // The daemon puts the log's last line into the job's failure reason: make it the cause.
  std::fprintf(stderr, "mt-train: %s: %s\n", std::string(what).c_str(),
               std::string(status.message()).c_str());
  std::fflush(stderr);
  return 1;
}

class Reporter {
 public:
  explicit Reporter(worker::ReportWriter writer) : writer_(writer) {}

  void Phase(mt::v1::RankPhase phase) {
    mt::v1::RankReport r;
    r.set_phase(phase);
    *r.mutable_progress() = progress_;
    Send(r);
  }

  // `send` on the trainer's log steps, where m.interval_loss is the mean since the last one
  // (the loss stays on the device on other steps).
  void Step(const engine::StepMetrics& m, const engine::MemoryStats& mem, bool send) {
    seconds_ += m.seconds;
    if (!send) return;
    progress_.set_step(m.iteration);
    progress_.set_total_steps(m.train_iterations);
    progress_.set_consumed_samples(m.consumed_samples);
    progress_.set_loss(m.interval_loss);
    progress_.set_learning_rate(m.learning_rate);
    progress_.set_grad_norm(m.grad_norm);
    progress_.set_loss_scale(m.loss_scale);
    progress_.set_skipped_steps(m.skipped_total);
    // The interval's figures: a single step's host time is only its queueing time on a GPU.
    const bool interval = m.interval_tokens_per_second > 0;
    progress_.set_tokens_per_second(interval ? m.interval_tokens_per_second : m.tokens_per_second);
    progress_.set_step_seconds(
        interval ? static_cast<double>(m.tokens) / m.interval_tokens_per_second : m.seconds);
    progress_.set_mfu(interval ? m.interval_mfu : m.mfu);
    progress_.set_memory_allocated_bytes(mem.allocated_bytes);
    progress_.set_memory_reserved_bytes(mem.reserved_bytes);
    progress_.set_memory_peak_bytes(mem.peak_allocated_bytes);
    const double per_step = seconds_ / std::max<int64_t>(1, m.iteration - first_step_ + 1);
    progress_.set_eta_seconds(per_step * static_cast<double>(m.train_iterations - m.iteration));
    *progress_.mutable_time() = TimeUtil::NanosecondsToTimestamp(absl::GetCurrentTimeNanos());
    mt::v1::RankReport r;
    r.set_phase(mt::v1::RANK_PHASE_TRAINING);
    *r.mutable_progress() = progress_;
    Send(r);
  }

  void Eval(const engine::EvalMetrics& e) {
    progress_.set_validation_loss(e.loss);
    progress_.set_validation_perplexity(e.perplexity);
    progress_.set_validation_step(e.iteration);
    mt::v1::RankReport r;
    r.set_phase(mt::v1::RANK_PHASE_TRAINING);
    *r.mutable_progress() = progress_;
    Send(r);
  }

  void Checkpoint(const checkpoint::SaveInfo& info) {
    mt::v1::RankReport r;
    r.set_phase(mt::v1::RANK_PHASE_TRAINING);
    *r.mutable_progress() = progress_;
    mt::v1::CheckpointReport* c = r.mutable_checkpoint();
    c->set_step(info.step);
    c->set_directory(info.directory);
    c->set_size_bytes(info.bytes);
    c->set_seconds(info.seconds);
    Send(r);
  }

  // The checkpoint this rank resumed from (worker metrics: mt_rank_checkpoint_load_*).
  void CheckpointLoad(int64_t step, const std::string& dir, int64_t bytes, double seconds) {
    mt::v1::RankReport r;
    r.set_phase(mt::v1::RANK_PHASE_STARTING);
    mt::v1::CheckpointReport* c = r.mutable_checkpoint_load();
    c->set_step(step);
    c->set_directory(dir);
    c->set_size_bytes(bytes);
    c->set_seconds(seconds);
    Send(r);
  }

  void set_first_step(int64_t s) { first_step_ = s; }

 private:
  void Send(const mt::v1::RankReport& r) {
    if (absl::Status s = writer_.Write(r); !s.ok() && !warned_) {
      MT_LOG(WARNING) << "progress reports stop: " << s.message();
      warned_ = true;
    }
  }

  worker::ReportWriter writer_;
  mt::v1::Progress progress_ = [] {
    mt::v1::Progress p;
    p.set_validation_loss(std::nan(""));
    p.set_validation_perplexity(std::nan(""));
    p.set_eta_seconds(-1);
    return p;
  }();
  double seconds_ = 0;
  int64_t first_step_ = 1;
  bool warned_ = false;
};

// The ranks of a save report to rank 0 through the job's rendezvous key-value space.
class RendezvousExchange : public checkpoint::SaveExchange {
 public:
  explicit RendezvousExchange(parallel::RendezvousClient* rendezvous) : rendezvous_(rendezvous) {}
  absl::Status Publish(int64_t step, int rank, const std::string& result) override {
    return rendezvous_->Set(Key(step, rank), result);
  }
  absl::StatusOr<std::vector<std::string>> Gather(int64_t step, int world_size,
                                                  absl::Duration timeout) override {
    std::vector<std::string> keys;
    for (int r = 0; r < world_size; ++r) keys.push_back(Key(step, r));
    return rendezvous_->Get(keys, timeout);
  }

 private:
  static std::string Key(int64_t step, int rank) {
    return absl::StrCat("checkpoint/", step, "/", rank);
  }
  parallel::RendezvousClient* rendezvous_;
};

}  // namespace

int RunRankCommand(const std::vector<std::string>& args) {
  std::string path;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--assignment" && i + 1 < args.size()) {
      path = args[++i];
    } else if (args[i].rfind("--assignment=", 0) == 0) {
      path = args[i].substr(13);
    } else {
      std::fprintf(stderr, "mt-train: unknown argument '%s'; usage: mt-train --assignment FILE\n",
                   args[i].c_str());
      return 2;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "mt-train: usage: mt-train --assignment FILE\n");
    return 2;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  auto bytes = ReadFile(path, 64 << 20);
  if (!bytes.ok()) return Fail(bytes.status(), "reading the assignment");
  mt::v1::Assignment assignment;
  mt::v1::JobSpec spec;
  if (!assignment.ParseFromString(*bytes) || !spec.ParseFromString(assignment.spec())) {
    return Fail(absl::DataLossError(path), "the assignment does not parse");
  }
  const int rank = assignment.coordinates().rank();
  const mt::v1::Layout& layout = assignment.layout();
  MT_LOG(INFO) << "rank " << rank << " of " << assignment.job_id() << " (attempt "
               << assignment.attempt() << "), world " << layout.world_size();
  Reporter reporter(worker::ReportWriter::FromEnvironment());
  reporter.Phase(mt::v1::RANK_PHASE_STARTING);

  std::string token;
  if (const char* tf = std::getenv("MT_TOKEN_FILE"); tf != nullptr && tf[0] != '\0') {
    auto tokens = rpc::ReadTokenFile(tf);
    if (!tokens.ok()) return Fail(tokens.status(), "MT_TOKEN_FILE");
    token = tokens->front();
  }
  parallel::RendezvousClient rendezvous(assignment.coordinator_address(), token,
                                        assignment.job_id(), assignment.attempt());
  const bool gpu = assignment.gpu_index() >= 0;
  if (const char* threads = std::getenv("MT_CPU_THREADS"); !gpu && threads != nullptr) {
    const int n = std::atoi(threads);
    if (n > 0) engine::SetCpuThreads(n);
  }
  parallel::DistOptions dist;
  dist.backend = gpu ? "nccl" : "gloo";
  if (spec.parallel().ddp_bucket_size() > 0)
    dist.bucket_elements = spec.parallel().ddp_bucket_size();
  auto distributed = parallel::InitDistributed(layout, rank, &rendezvous, dist);
  if (!distributed.ok()) return Fail(distributed.status(), "joining the process groups");
  const int dp_rank = distributed->collectives->dp_rank();
  const int dp_size = distributed->collectives->dp_size();
  if (spec.training().global_batch_size() == 0) {
    spec.mutable_training()->set_global_batch_size(spec.training().micro_batch_size() * dp_size);
  }

  // What to start from: a restart's checkpoint, else --load (none = from scratch).
  const mt::v1::CheckpointSpec& ckpt_spec = spec.checkpoint();
  const std::string load_path =
      !assignment.resume_from().empty() ? assignment.resume_from() : ckpt_spec.load_dir();
  std::optional<checkpoint::LoadChoice> load;
  double load_seconds = 0;  // choosing (reading and verifying) + restoring
  if (!load_path.empty()) {
    const absl::Time load_start = absl::Now();
    checkpoint::LoadOptions load_options;
    load_options.keep_own_files = true;  // verified once, restored from memory
    load_options.tp_rank = assignment.coordinates().tp();
    load_options.pp_rank = assignment.coordinates().pp();
    load_options.tp_size = std::max(1, layout.tensor_model_parallel_size());
    load_options.pp_size = std::max(1, layout.pipeline_model_parallel_size());
    // A GPU rank's files go to its GPU as they are read (its only device: CUDA_VISIBLE_DEVICES);
    // a CPU rank on a GPU machine must not start CUDA.
    load_options.stage_device = gpu ? "cuda:0" : "";
    auto chosen = checkpoint::ChooseLoad(load_path, load_options);
    load_seconds = absl::ToDoubleSeconds(absl::Now() - load_start);
    if (!chosen.ok()) return Fail(chosen.status(), "choosing the checkpoint to load");
    load = *std::move(chosen);
    if (!load.has_value()) {
      MT_LOG(WARNING) << "no checkpoint in " << load_path << "; training from scratch";
    } else {
      MT_LOG(INFO) << "loading " << load->dir << " (step " << load->manifest.step() << ")";
    }
  }
  const bool weights_only =
      load.has_value() && (ckpt_spec.finetune() || !load->manifest.has_trainer());
  const int64_t consumed =
      load.has_value() && !weights_only ? load->manifest.trainer().consumed_samples() : 0;

  auto data = engine::DataSourcesFromSpec(spec, consumed, dp_rank, dp_size);
  if (!data.ok()) return Fail(data.status(), "data");
  engine::TrainerOptions options;
  // The daemon sets CUDA_VISIBLE_DEVICES to the rank's GPU: it is device 0 here.
  options.device = gpu ? "cuda:0" : "cpu";
  options.collectives = distributed->collectives.get();
  options.groups = distributed->groups;
  options.num_devices = layout.world_size();
  // TensorBoard records every step's loss (Megatron's default interval of 1): read it back.
  options.sync_every_step = !spec.logging().tensorboard_dir().empty();
  const bool sixteen_bit = spec.training().precision() == mt::v1::PRECISION_BF16 ||
                           spec.training().precision() == mt::v1::PRECISION_FP16;
  options.peak_flops_per_second = gpu && sixteen_bit ? kH200PeakBf16 : 0.0;
  if (const char* peak = std::getenv("MT_PEAK_TFLOPS"); peak != nullptr) {
    options.peak_flops_per_second = std::atof(peak) * 1e12;
  }
  auto trainer =
      engine::Trainer::Create(spec, options, std::move(data->train), std::move(data->valid));
  if (!trainer.ok()) return Fail(trainer.status(), "building the trainer");
  engine::Trainer& t = **trainer;
  if (load.has_value()) {
    const absl::Time restore_start = absl::Now();
    auto source = checkpoint::OpenLoadSource(*load);
    if (!source.ok()) return Fail(source.status(), "opening the checkpoint");
    checkpoint::RestoreOptions restore;
    restore.load_optimizer = !ckpt_spec.no_load_optim();
    restore.load_rng = !ckpt_spec.no_load_rng();
    restore.weights_only = weights_only;
    restore.tp_rank = assignment.coordinates().tp();
    restore.tp_size = std::max(1, layout.tensor_model_parallel_size());
    if (absl::Status s = checkpoint::RestoreTrainer(t, **source, restore); !s.ok()) {
      return Fail(s, absl::StrCat("loading ", load->dir));
    }
    source->reset();
    load->files.reset();       // the files kept in memory for the restore
    load->attachment.reset();  // and their copies on the GPU (the whole shard)
    load_seconds += absl::ToDoubleSeconds(absl::Now() - restore_start);
    reporter.CheckpointLoad(load->manifest.step(), load->dir, load->bytes_read, load_seconds);
  }
  RendezvousExchange exchange(&rendezvous);
  checkpoint::LocalExchange local_exchange;
  std::unique_ptr<checkpoint::Checkpointer> saver;
  if (!ckpt_spec.save_dir().empty()) {
    checkpoint::CheckpointerOptions o;
    o.save_dir = ckpt_spec.save_dir();
    o.async_save = ckpt_spec.async_save();
    o.job_id = assignment.job_id();
    o.attempt = assignment.attempt();
    o.spec = spec;
    o.layout = layout;
    o.coordinates = assignment.coordinates();
    auto c = checkpoint::Checkpointer::Create(
        o, layout.world_size() > 1 ? static_cast<checkpoint::SaveExchange*>(&exchange)
                                   : &local_exchange);
    if (!c.ok()) return Fail(c.status(), "checkpoint.save_dir");
    saver = *std::move(c);
    // The snapshot's (pinned) host buffer now, not in the first async save's stall.
    if (o.async_save) {
      if (absl::Status s = saver->Prepare(t); !s.ok()) return Fail(s, "checkpoint host buffer");
    }
  }
  reporter.Phase(mt::v1::RANK_PHASE_TRAINING);

  // Metrics for the daemon's Prometheus endpoint and TensorBoard files (docs/metrics.md).
  auto observability = worker::metrics::RankObservability::Create(
      spec, assignment, t.plan(), worker::ReportWriter::FromEnvironment());
  if (!observability.ok()) return Fail(observability.status(), "TensorBoard");
  const int64_t log_interval = std::max<int64_t>(1, t.plan().log_interval);
  reporter.set_first_step(t.iteration() + 1);
  double last_loss = std::nan("");
  double last_valid_loss = std::nan("");
  absl::Status save_status;
  auto report_saves = [&]() {
    if (saver == nullptr) return;
    for (const checkpoint::SaveInfo& info : saver->TakeFinished()) {
      if (info.status.ok()) {
        reporter.Checkpoint(info);
      } else if (save_status.ok()) {
        save_status = info.status;  // an async save failed: stop like a sync one
      }
    }
  };
  auto save = [&]() {
    if (saver == nullptr || saver->last_saved_step() == t.iteration()) return;
    save_status = saver->Save(t, last_loss, last_valid_loss);
    report_saves();
  };
  const int64_t save_interval = ckpt_spec.save_interval();
  absl::Status status = t.Train(
      [&](const engine::StepMetrics& m) {
        const bool send = m.iteration % log_interval == 0 || m.iteration == m.train_iterations;
        reporter.Step(m, t.memory(), send);
        for (const parallel::CommTime& c : t.TakeCommunication()) {
          (*observability)->AddCommunication(c.collective, c.group, c.seconds, c.calls);
        }
        (*observability)->OnStep(m, send, [&] { return t.memory(); });
        last_loss = m.loss;
        report_saves();
        if (save_interval > 0 && m.iteration % save_interval == 0) save();
        if (!save_status.ok()) return false;
        // Every rank stops at the same step (a save on SIGTERM needs them all).
        double stop = g_stop_signal.load() != 0 ? 1.0 : 0.0;
        if (saver != nullptr && options.collectives != nullptr) {
          auto any = options.collectives->MaxScalarOverWorld(stop);
          if (any.ok()) stop = *any;
        }
        return stop == 0.0;
      },
      [&](const engine::EvalMetrics& e) {
        last_valid_loss = e.loss;
        reporter.Eval(e);
        (*observability)->OnEval(e, t.consumed_samples());
      });
  (*observability)->Finish(t.memory());
  if (!status.ok()) return Fail(status, "training");
  if (!save_status.ok()) return Fail(save_status, "saving the checkpoint");
  // The last step, or where SIGTERM/cancel stopped the run, is always saved.
  save();
  if (saver != nullptr) {
    saver->Wait();
    report_saves();
  }
  if (!save_status.ok()) return Fail(save_status, "saving the checkpoint");
  if (int sig = g_stop_signal.load(); sig != 0 || t.iteration() < t.plan().train_iterations) {
    MT_LOG(INFO) << "stopped by signal " << sig << " at step " << t.iteration();
    return 128 + (sig != 0 ? sig : SIGTERM);
  }
  MT_LOG(INFO) << "rank " << rank << " finished " << t.iteration() << " steps";
  return 0;
}

}  // namespace mt::train
