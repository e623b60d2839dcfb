#include "worker/daemon/worker_metrics.h"

#include <cmath>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mt::worker::metrics {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;

const std::vector<double>& CheckpointSecondsBuckets() {
  static const auto* b =
      new std::vector<double>{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
  return *b;
}

// Collective and group names come from the trainer; only these reach a label.
std::string Bounded(const std::string& value, const std::set<std::string>& allowed) {
  return allowed.count(value) > 0 ? value : "other";
}

const std::set<std::string>& Collectives() {
  // What worker/parallel/comm_stats.h records.
  static const auto* s = new std::set<std::string>{"all_reduce", "all_gather", "reduce_scatter",
                                                   "broadcast",  "send",       "recv"};
  return *s;
}

const std::set<std::string>& Groups() {
  static const auto* s =
      new std::set<std::string>{"dp", "tp", "pp", "embedding", "model_parallel", "world"};
  return *s;
}

std::string Key(const std::string& job, int attempt, int rank) {
  return absl::StrCat(job, "/", attempt, "/", rank);
}

}  // namespace

const std::vector<double>& WorkerMetrics::StepSecondsBuckets() {
  static const auto* b =
      new std::vector<double>{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  return *b;
}

struct WorkerMetrics::Rank {
  Labels labels;
  Gauge* step;
  Gauge* attempt;
  Gauge* loss;
  Gauge* validation_loss = nullptr;  // after the first evaluation
  Gauge* learning_rate;
  Gauge* grad_norm;
  Gauge* loss_scale;
  Counter* skipped;
  Gauge* tokens_per_second;
  Counter* tokens;
  Counter* samples;
  Histogram* step_seconds;
  Gauge* mfu;
  Gauge* memory_allocated;
  Gauge* memory_reserved;
  Gauge* memory_peak;
  Counter* data_wait;
  std::map<std::pair<std::string, std::string>, Counter*> comm;
  Histogram* checkpoint_save_seconds;
  Counter* checkpoint_saved_bytes;
  Histogram* checkpoint_load_seconds;
  Counter* checkpoint_loaded_bytes;
  int64_t skipped_seen = 0;
  int64_t samples_seen = 0;
  bool ended = false;
  absl::Time ended_at;
};

WorkerMetrics::WorkerMetrics(prometheus::Registry* registry,
                             const mt::v1::WorkerResources& resources, const std::string& version,
                             const Clock* clock, absl::Duration linger)
    : clock_(clock),
      linger_(linger),
      node_(resources.node()),
      gpu_(resources.gpu_index() < 0 ? "cpu" : absl::StrCat(resources.gpu_index())) {
  prometheus::Registry& r = *registry;
  const Labels self = {{"node", node_}, {"gpu", gpu_}};
  Labels info = self;
  info["device"] = resources.device_name();
  info["version"] = version;
  prometheus::BuildGauge()
      .Name("mt_worker_info")
      .Help("Always 1; the labels describe the worker daemon (node, gpu, device, version).")
      .Register(r)
      .Add(info)
      .Set(1);
  busy_ = &prometheus::BuildGauge()
               .Name("mt_worker_busy")
               .Help("1 while the worker runs a rank, else 0.")
               .Register(r)
               .Add(self);
  started_ = &prometheus::BuildCounter()
                  .Name("mt_worker_ranks_started_total")
                  .Help("Trainer processes this daemon started.")
                  .Register(r)
                  .Add(self);
  ended_ = &prometheus::BuildCounter()
                .Name("mt_worker_ranks_ended_total")
                .Help("Ranks that ended here, by outcome (succeeded, failed, stopped).")
                .Register(r);
  for (const char* outcome : {"succeeded", "failed", "stopped"}) {
    Labels l = self;
    l["outcome"] = outcome;
    ended_->Add(l);
  }
  reports_ = &prometheus::BuildCounter()
                  .Name("mt_worker_rank_reports_total")
                  .Help("Reports received from this worker's ranks over the trainer pipe.")
                  .Register(r)
                  .Add(self);

  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(r);
  };
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(r);
  };
  auto histogram = [&](const char* name, const char* help) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Register(r);
  };
  step_ = gauge("mt_rank_step", "The latest training iteration the rank finished.");
  attempt_ =
      gauge("mt_rank_attempt", "The job's restart attempt this rank belongs to (0 = first).");
  loss_ = gauge("mt_rank_loss", "Training loss of the latest step (mean over the global batch).");
  validation_loss_ = gauge("mt_rank_validation_loss", "Loss of the latest evaluation.");
  learning_rate_ = gauge("mt_rank_learning_rate", "Learning rate the latest step used.");
  grad_norm_ = gauge("mt_rank_grad_norm",
                     "Global gradient norm of the latest step, before clipping (+Inf/NaN when "
                     "the step was skipped).");
  loss_scale_ = gauge("mt_rank_loss_scale", "Loss scale the latest step used (1 without scaling).");
  skipped_ = counter("mt_rank_skipped_steps_total", "Steps skipped for inf/NaN gradients.");
  tokens_per_second_ =
      gauge("mt_rank_tokens_per_second",
            "Tokens per second of the whole job over the latest logging interval.");
  tokens_ = counter("mt_rank_tokens_total", "Tokens trained on by the whole job, as seen here.");
  samples_ = counter("mt_rank_consumed_samples_total", "Samples consumed by the whole job.");
  step_seconds_ = histogram("mt_rank_step_seconds", "Wall time of each training step.");
  mfu_ = gauge("mt_rank_model_flops_utilization_ratio",
               "Model FLOPs utilisation of the latest step, 0..1 (0 when the device peak is "
               "unknown, e.g. on CPU).");
  memory_allocated_ = gauge("mt_rank_memory_allocated_bytes",
                            "Device memory allocated by tensors (process RSS on a CPU rank).");
  memory_reserved_ = gauge("mt_rank_memory_reserved_bytes",
                           "Device memory held by the caching allocator (RSS on a CPU rank).");
  memory_peak_ = gauge("mt_rank_memory_peak_bytes",
                       "Peak device memory allocated since the rank started (RSS on CPU).");
  data_wait_ = counter("mt_rank_data_wait_seconds_total",
                       "Time the training step waited for the data loader.");
  comm_ = counter("mt_rank_communication_seconds_total",
                  "Time spent in collectives, by collective and process group.");
  checkpoint_save_seconds_ =
      histogram("mt_rank_checkpoint_save_seconds", "Time to write each checkpoint (this rank).");
  checkpoint_saved_bytes_ =
      counter("mt_rank_checkpoint_saved_bytes_total", "Checkpoint bytes this rank wrote.");
  checkpoint_load_seconds_ =
      histogram("mt_rank_checkpoint_load_seconds", "Time to load each checkpoint (this rank).");
  checkpoint_loaded_bytes_ =
      counter("mt_rank_checkpoint_loaded_bytes_total", "Checkpoint bytes this rank read.");
}

WorkerMetrics::~WorkerMetrics() = default;

void WorkerMetrics::OnRankStarted(const mt::v1::Assignment& a) {
  absl::MutexLock lock(&mu_);
  // One rank at a time per worker: series that still linger go now, so that a rank of the
  // same job (a restart) starts from fresh series instead of sharing them.
  for (auto& [key, rank] : ranks_) RemoveLocked(rank.get());
  ranks_.clear();
  auto rank = std::make_unique<Rank>();
  const auto& c = a.coordinates();
  rank->labels = {{"job", a.job_id()},
                  {"rank", absl::StrCat(c.rank())},
                  {"tp", absl::StrCat(c.tp())},
                  {"pp", absl::StrCat(c.pp())},
                  {"dp", absl::StrCat(c.dp())},
                  {"node", node_},
                  {"gpu", gpu_}};
  const Labels& l = rank->labels;
  rank->step = &step_->Add(l);
  rank->attempt = &attempt_->Add(l);
  rank->attempt->Set(a.attempt());
  rank->loss = &loss_->Add(l);
  rank->learning_rate = &learning_rate_->Add(l);
  rank->grad_norm = &grad_norm_->Add(l);
  rank->loss_scale = &loss_scale_->Add(l);
  rank->loss_scale->Set(1);
  rank->skipped = &skipped_->Add(l);
  rank->tokens_per_second = &tokens_per_second_->Add(l);
  rank->tokens = &tokens_->Add(l);
  rank->samples = &samples_->Add(l);
  rank->step_seconds = &step_seconds_->Add(l, StepSecondsBuckets());
  rank->mfu = &mfu_->Add(l);
  rank->memory_allocated = &memory_allocated_->Add(l);
  rank->memory_reserved = &memory_reserved_->Add(l);
  rank->memory_peak = &memory_peak_->Add(l);
  rank->data_wait = &data_wait_->Add(l);
  Labels dp = l;
  dp["collective"] = "all_reduce";
  dp["group"] = "dp";
  rank->comm[{"all_reduce", "dp"}] = &comm_->Add(dp);
  rank->checkpoint_save_seconds = &checkpoint_save_seconds_->Add(l, CheckpointSecondsBuckets());
  rank->checkpoint_saved_bytes = &checkpoint_saved_bytes_->Add(l);
  rank->checkpoint_load_seconds = &checkpoint_load_seconds_->Add(l, CheckpointSecondsBuckets());
  rank->checkpoint_loaded_bytes = &checkpoint_loaded_bytes_->Add(l);
  ranks_[Key(a.job_id(), a.attempt(), c.rank())] = std::move(rank);
  busy_->Set(1);
  started_->Increment();
}

void WorkerMetrics::OnRankReport(const mt::v1::RankReport& report) {
  reports_->Increment();
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find(Key(report.job_id(), report.attempt(), report.rank()));
  if (it == ranks_.end()) return;
  Rank& r = *it->second;
  if (report.has_telemetry()) {
    const mt::v1::RankTelemetry& t = report.telemetry();
    r.step->Set(static_cast<double>(t.step()));
    r.loss->Set(t.loss());
    r.learning_rate->Set(t.learning_rate());
    r.grad_norm->Set(t.grad_norm());
    r.loss_scale->Set(t.loss_scale());
    if (t.skipped_steps() > r.skipped_seen) {
      r.skipped->Increment(static_cast<double>(t.skipped_steps() - r.skipped_seen));
      r.skipped_seen = t.skipped_steps();
    }
    if (t.consumed_samples() > r.samples_seen) {
      r.samples->Increment(static_cast<double>(t.consumed_samples() - r.samples_seen));
      r.samples_seen = t.consumed_samples();
    }
    r.tokens_per_second->Set(t.tokens_per_second());
    if (t.tokens() > 0) r.tokens->Increment(static_cast<double>(t.tokens()));
    for (double s : t.step_seconds()) r.step_seconds->Observe(s);
    r.mfu->Set(t.mfu());
    r.memory_allocated->Set(static_cast<double>(t.memory_allocated_bytes()));
    r.memory_reserved->Set(static_cast<double>(t.memory_reserved_bytes()));
    r.memory_peak->Set(static_cast<double>(t.memory_peak_bytes()));
    if (t.data_wait_seconds() > 0) r.data_wait->Increment(t.data_wait_seconds());
    for (const mt::v1::CommunicationTime& c : t.communication()) {
      const auto key =
          std::make_pair(Bounded(c.collective(), Collectives()), Bounded(c.group(), Groups()));
      Counter*& counter = r.comm[key];
      if (counter == nullptr) {
        Labels l = r.labels;
        l["collective"] = key.first;
        l["group"] = key.second;
        counter = &comm_->Add(l);
      }
      if (c.seconds() > 0) counter->Increment(c.seconds());
    }
  }
  if (report.has_progress() && report.progress().validation_step() > 0 &&
      !std::isnan(report.progress().validation_loss())) {
    if (r.validation_loss == nullptr) r.validation_loss = &validation_loss_->Add(r.labels);
    r.validation_loss->Set(report.progress().validation_loss());
  }
  if (report.has_checkpoint()) {
    r.checkpoint_save_seconds->Observe(report.checkpoint().seconds());
    if (report.checkpoint().size_bytes() > 0) {
      r.checkpoint_saved_bytes->Increment(static_cast<double>(report.checkpoint().size_bytes()));
    }
  }
  if (report.has_checkpoint_load()) {
    r.checkpoint_load_seconds->Observe(report.checkpoint_load().seconds());
    if (report.checkpoint_load().size_bytes() > 0) {
      r.checkpoint_loaded_bytes->Increment(
          static_cast<double>(report.checkpoint_load().size_bytes()));
    }
  }
}

void WorkerMetrics::OnRankExited(const mt::v1::RankExitReport& report) {
  const char* outcome = report.outcome() == mt::v1::RANK_OUTCOME_SUCCEEDED ? "succeeded"
                        : report.outcome() == mt::v1::RANK_OUTCOME_STOPPED ? "stopped"
                                                                           : "failed";
  ended_->Add({{"node", node_}, {"gpu", gpu_}, {"outcome", outcome}}).Increment();
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find(Key(report.job_id(), report.attempt(), report.rank()));
  if (it != ranks_.end() && !it->second->ended) {
    it->second->ended = true;
    it->second->ended_at = clock_->Now();
  }
  bool running = false;
  for (const auto& [key, rank] : ranks_) running = running || !rank->ended;
  busy_->Set(running ? 1 : 0);
}

void WorkerMetrics::OnTick() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    if (it->second->ended && now - it->second->ended_at >= linger_) {
      RemoveLocked(it->second.get());
      it = ranks_.erase(it);
    } else {
      ++it;
    }
  }
}

int WorkerMetrics::ranks_with_series() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(ranks_.size());
}

void WorkerMetrics::RemoveLocked(Rank* r) {
  step_->Remove(r->step);
  attempt_->Remove(r->attempt);
  loss_->Remove(r->loss);
  if (r->validation_loss != nullptr) validation_loss_->Remove(r->validation_loss);
  learning_rate_->Remove(r->learning_rate);
  grad_norm_->Remove(r->grad_norm);
  loss_scale_->Remove(r->loss_scale);
  skipped_->Remove(r->skipped);
  tokens_per_second_->Remove(r->tokens_per_second);
  tokens_->Remove(r->tokens);
  samples_->Remove(r->samples);
  step_seconds_->Remove(r->step_seconds);
  mfu_->Remove(r->mfu);
  memory_allocated_->Remove(r->memory_allocated);
  memory_reserved_->Remove(r->memory_reserved);
  memory_peak_->Remove(r->memory_peak);
  data_wait_->Remove(r->data_wait);
  for (auto& [key, c] : r->comm) comm_->Remove(c);
  checkpoint_save_seconds_->Remove(r->checkpoint_save_seconds);
  checkpoint_saved_bytes_->Remove(r->checkpoint_saved_bytes);
  checkpoint_load_seconds_->Remove(r->checkpoint_load_seconds);
  checkpoint_loaded_bytes_->Remove(r->checkpoint_loaded_bytes);
}

}  // namespace mt::worker::metrics
