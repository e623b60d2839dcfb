#include "coordinator/metrics/coordinator_metrics.h"

#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/json.h"
#include "common/base/version.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/workers/registry.h"
#include "google/protobuf/util/time_util.h"
#include "prometheus/collectable.h"
#include "prometheus/gauge.h"
#include "prometheus/metric_family.h"

namespace mt::coordinator {
namespace {

using google::protobuf::util::TimeUtil;
using prometheus::ClientMetric;
using prometheus::MetricFamily;

// "JOB_STATE_RUNNING" -> "running".
std::string Lower(std::string name, const std::string& prefix) {
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string JobStateLabel(mt::v1::JobState s) {
  return Lower(mt::v1::JobState_Name(s), "JOB_STATE_");
}

MetricFamily Gauges(const std::string& name, const std::string& help) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = prometheus::MetricType::Gauge;
  return f;
}

void AddGauge(MetricFamily* f, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  f->metric.push_back(std::move(m));
}

// Job and worker counts, read when scraped.
class ClusterState : public prometheus::Collectable {
 public:
  ClusterState(JobManager* jobs, WorkerRegistry* registry) : jobs_(jobs), registry_(registry) {}

  std::vector<MetricFamily> Collect() const override {
    std::vector<MetricFamily> out;
    const std::map<mt::v1::JobState, int> counts = jobs_->CountByState();
    MetricFamily jobs = Gauges("mt_coordinator_jobs", "Jobs the coordinator holds, by state.");
    for (int s = mt::v1::JOB_STATE_PENDING; s <= mt::v1::JOB_STATE_CANCELLED; ++s) {
      const auto state = static_cast<mt::v1::JobState>(s);
      auto it = counts.find(state);
      AddGauge(&jobs, {{"state", JobStateLabel(state)}}, it == counts.end() ? 0 : it->second);
    }
    out.push_back(std::move(jobs));
    MetricFamily queue = Gauges("mt_coordinator_queue_length",
                                "Jobs waiting for workers (PENDING), in scheduling order.");
    auto pending = counts.find(mt::v1::JOB_STATE_PENDING);
    AddGauge(&queue, {}, pending == counts.end() ? 0 : pending->second);
    out.push_back(std::move(queue));

    MetricFamily workers = Gauges("mt_coordinator_workers",
                                  "Worker daemons the coordinator knows, by node and state.");
    for (const auto& [node, c] : registry_->CountsByNode()) {
      if (c.gone == c.total) continue;  // a node that left for good is not a label any more
      const std::pair<const char*, int> states[] = {{"idle", c.idle},
                                                    {"busy", c.busy},
                                                    {"draining", c.draining},
                                                    {"lost", c.lost},
                                                    {"gone", c.gone}};
      for (const auto& [state, n] : states) {
        AddGauge(&workers, {{"node", node}, {"state", state}}, n);
      }
    }
    out.push_back(std::move(workers));
    AddHealth(&out);
    return out;
  }

  // Hang and straggler detection (coordinator/jobs/hang_detector.h, straggler_tracker.h).
  void AddHealth(std::vector<MetricFamily>* out) const {
    MetricFamily stalled = Gauges("mt_job_no_progress_seconds",
                                  "Seconds since the most stalled rank of a RUNNING job moved.");
    for (const auto& [job, seconds] : jobs_->NoProgressSeconds()) {
      AddGauge(&stalled, {{"job", job}}, seconds);
    }
    out->push_back(std::move(stalled));
    MetricFamily ratio =
        Gauges("mt_job_rank_step_time_ratio",
               "A rank's compute time per step over the median of its job's other ranks.");
    for (const JobManager::RankHealth& h : jobs_->RankHealthSnapshot()) {
      AddGauge(&ratio, {{"job", h.job_id}, {"rank", std::to_string(h.rank)}}, h.step_time_ratio);
    }
    out->push_back(std::move(ratio));
    MetricFamily hangs;
    hangs.name = "mt_coordinator_hangs_detected_total";
    hangs.help = "Jobs restarted because a rank made no progress (hang detection).";
    hangs.type = prometheus::MetricType::Counter;
    ClientMetric m;
    m.counter.value = static_cast<double>(jobs_->HangsDetected());
    hangs.metric.push_back(std::move(m));
    out->push_back(std::move(hangs));
    MetricFamily save_failures;
    save_failures.name = "mt_coordinator_checkpoint_save_failures_total";
    save_failures.help =
        "Checkpoint saves that failed (once per job and step; the job's event says why).";
    save_failures.type = prometheus::MetricType::Counter;
    ClientMetric f;
    f.counter.value = static_cast<double>(jobs_->CheckpointSaveFailures());
    save_failures.metric.push_back(std::move(f));
    out->push_back(std::move(save_failures));
  }

 private:
  JobManager* jobs_;
  WorkerRegistry* registry_;
};

class RpcTimer : public grpc::experimental::Interceptor {
 public:
  RpcTimer(CoordinatorMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method != nullptr ? method : ""), start_(absl::Now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->ObserveRpc(method_, methods->GetSendStatus().error_code(),
                           absl::ToDoubleSeconds(absl::Now() - start_));
    }
    methods->Proceed();
  }

 private:
  CoordinatorMetrics* metrics_;
  std::string method_;
  absl::Time start_;
};

class RpcTimerFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcTimerFactory(CoordinatorMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcTimer(metrics_, info->method());
  }

 private:
  CoordinatorMetrics* metrics_;
};

}  // namespace

// The last `mtctl eval` result per job whose checkpoint was evaluated and per weights the
// evaluation used (`mtctl eval --quantize`: "none", the checkpoint's own, or "int8"), so that an
// int8 evaluation never stands in for the checkpoint's own loss. A collectable of its own so
// that the families (their TYPE lines) are exposed before the first evaluation too.
class EvalResults : public prometheus::Collectable {
 public:
  void Set(const std::string& job, const std::string& weights, const mt::v1::Progress& p) {
    absl::MutexLock lock(&mu_);
    results_[{job, weights}] = {p.validation_loss(), p.validation_perplexity(),
                                static_cast<double>(p.validation_step())};
  }
  void Erase(const std::string& job) {
    absl::MutexLock lock(&mu_);
    results_.erase(results_.lower_bound({job, ""}), results_.lower_bound({job + '\0', ""}));
  }

  std::vector<MetricFamily> Collect() const override {
    std::vector<MetricFamily> out = {
        Gauges("mt_checkpoint_eval_loss",
               "Loss of the last `mtctl eval` of a checkpoint of the job (the job that saved it)."),
        Gauges("mt_checkpoint_eval_perplexity",
               "Perplexity of the last `mtctl eval` of a checkpoint of the job."),
        Gauges("mt_checkpoint_eval_step",
               "Step of the checkpoint the last `mtctl eval` of the job evaluated.")};
    absl::MutexLock lock(&mu_);
    for (const auto& [key, values] : results_) {
      for (size_t i = 0; i < out.size(); ++i) {
        AddGauge(&out[i], {{"job", key.first}, {"weights", key.second}}, values[i]);
      }
    }
    return out;
  }

 private:
  mutable absl::Mutex mu_;
  // By (job, weights).
  std::map<std::pair<std::string, std::string>, std::array<double, 3>> results_
      ABSL_GUARDED_BY(mu_);
};

std::string GrpcCodeName(int code) {
  static const std::array<const char*, 17> kNames = {"OK",
                                                     "CANCELLED",
                                                     "UNKNOWN",
                                                     "INVALID_ARGUMENT",
                                                     "DEADLINE_EXCEEDED",
                                                     "NOT_FOUND",
                                                     "ALREADY_EXISTS",
                                                     "PERMISSION_DENIED",
                                                     "RESOURCE_EXHAUSTED",
                                                     "FAILED_PRECONDITION",
                                                     "ABORTED",
                                                     "OUT_OF_RANGE",
                                                     "UNIMPLEMENTED",
                                                     "INTERNAL",
                                                     "UNAVAILABLE",
                                                     "DATA_LOSS",
                                                     "UNAUTHENTICATED"};
  return code >= 0 && code < static_cast<int>(kNames.size()) ? kNames[code] : "UNKNOWN";
}

CoordinatorMetrics::CoordinatorMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      eval_results_(std::make_shared<EvalResults>()) {
  prometheus::Registry& r = *registry_;
  prometheus::BuildGauge()
      .Name("mt_coordinator_info")
      .Help("Always 1; the version label is the coordinator's.")
      .Register(r)
      .Add({{"version", kVersion}})
      .Set(1);
  restarts_ = &prometheus::BuildCounter()
                   .Name("mt_coordinator_job_restarts_total")
                   .Help("Times a job went to RESTARTING after a rank or worker failure.")
                   .Register(r)
                   .Add({});
  finished_ = &prometheus::BuildCounter()
                   .Name("mt_coordinator_jobs_finished_total")
                   .Help("Jobs that reached a terminal state, by state.")
                   .Register(r);
  for (const char* s : {"succeeded", "failed", "cancelled"}) finished_->Add({{"state", s}});
  scheduling_latency_ =
      &prometheus::BuildHistogram()
           .Name("mt_coordinator_scheduling_latency_seconds")
           .Help("Time from a job entering PENDING to its ranks being placed (SCHEDULED).")
           .Register(r)
           .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60,
                                                            300, 900, 3600, 14400, 86400});
  rpc_seconds_ = &prometheus::BuildHistogram()
                      .Name("mt_coordinator_rpc_duration_seconds")
                      .Help(
                          "Time to serve each RPC, by service, method and status code (for a "
                          "streaming RPC: the stream's lifetime).")
                      .Register(r);
  eval_tokens_ = &prometheus::BuildCounter()
                      .Name("mt_checkpoint_eval_tokens_total")
                      .Help("Tokens evaluated by succeeded `mtctl eval` jobs.")
                      .Register(r)
                      .Add({});
}

std::vector<std::shared_ptr<prometheus::Collectable>> CoordinatorMetrics::collectables() const {
  return {registry_, eval_results_};
}

CoordinatorMetrics::~CoordinatorMetrics() {
  std::unique_ptr<metrics::MetricsServer> server;
  {
    absl::MutexLock lock(&mu_);
    server = std::move(server_);
  }
  server.reset();  // waits for scrapes in flight, outside the lock
}

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
CoordinatorMetrics::InterceptorFactories() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<RpcTimerFactory>(this));
  return out;
}

void CoordinatorMetrics::ObserveRpc(const std::string& full_method, int code, double seconds) {
  // "/mt.v1.ClientService/SubmitJob" -> service "ClientService", method "SubmitJob". Only our
  // own and gRPC's services are named; anything else would be a label a client chooses.
  std::string service = "other", method = "other";
  std::vector<std::string> parts = absl::StrSplit(full_method, '/', absl::SkipEmpty());
  if (parts.size() == 2 && (parts[0].rfind("mt.v1.", 0) == 0 || parts[0].rfind("grpc.", 0) == 0)) {
    service = parts[0].substr(parts[0].rfind('.') + 1);
    method = parts[1];
  }
  static const auto* kBuckets = new prometheus::Histogram::BucketBoundaries{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
      0.5,    1,     2.5,    5,     10,   30,    60,   300, 3600};
  rpc_seconds_
      ->Add({{"service", service}, {"method", method}, {"code", GrpcCodeName(code)}}, *kBuckets)
      .Observe(seconds);
}

void CoordinatorMetrics::OnJobTransition(const mt::v1::Job& job, mt::v1::JobState from,
                                         mt::v1::JobState to, absl::Time now) {
  if (to == mt::v1::JOB_STATE_RESTARTING) restarts_->Increment();
  if (to == mt::v1::JOB_STATE_SUCCEEDED && job.spec().inference().has_eval()) {
    // Labelled by the job that saved the checkpoint: one series per training job evaluated.
    const std::string& source = job.spec().inference().checkpoint_job_id();
    const std::string& quantize = job.spec().inference().eval().quantize();
    eval_results_->Set(source.empty() ? "imported" : source, quantize.empty() ? "none" : quantize,
                       job.progress());
    eval_tokens_->Increment(static_cast<double>(job.progress().evaluated_tokens()));
  }
  if (to == mt::v1::JOB_STATE_SUCCEEDED || to == mt::v1::JOB_STATE_FAILED ||
      to == mt::v1::JOB_STATE_CANCELLED) {
    finished_->Add({{"state", JobStateLabel(to)}}).Increment();
  }
  absl::MutexLock lock(&mu_);
  if (to == mt::v1::JOB_STATE_PENDING) {
    pending_since_[job.id()] = now;
    return;
  }
  auto it = pending_since_.find(job.id());
  if (to == mt::v1::JOB_STATE_SCHEDULED && from == mt::v1::JOB_STATE_PENDING) {
    const absl::Time since =
        it != pending_since_.end()
            ? it->second
            : absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(job.create_time()));
    scheduling_latency_->Observe(std::max(0.0, absl::ToDoubleSeconds(now - since)));
  }
  if (it != pending_since_.end()) pending_since_.erase(it);
}

void CoordinatorMetrics::OnJobDeleted(const mt::v1::Job& job) {
  eval_results_->Erase(job.id());
  absl::MutexLock lock(&mu_);
  pending_since_.erase(job.id());
}

absl::Status CoordinatorMetrics::Serve(const metrics::MetricsServerOptions& options,
                                       JobManager* jobs, WorkerRegistry* registry) {
  auto state = std::make_shared<ClusterState>(jobs, registry);
  absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> server =
      metrics::MetricsServer::Start(options, {registry_, eval_results_, state});
  if (!server.ok()) return server.status();
  (*server)->Handle("/sd", [registry] {
    metrics::HttpResponse r;
    r.content_type = "application/json";
    r.body = ServiceDiscoveryJson(registry->List(
        {mt::v1::WORKER_STATE_IDLE, mt::v1::WORKER_STATE_BUSY, mt::v1::WORKER_STATE_DRAINING},
        /*node=*/""));
    return r;
  });
  absl::MutexLock lock(&mu_);
  server_ = *std::move(server);
  return absl::OkStatus();
}

std::string CoordinatorMetrics::metrics_url() {
  absl::MutexLock lock(&mu_);
  return server_ == nullptr ? "" : server_->Url("/metrics");
}

std::string CoordinatorMetrics::sd_url() {
  absl::MutexLock lock(&mu_);
  return server_ == nullptr ? "" : server_->Url("/sd");
}

std::string ServiceDiscoveryJson(const std::vector<mt::v1::Worker>& workers) {
  std::string out = "[";
  bool first = true;
  for (const mt::v1::Worker& w : workers) {
    if (w.metrics_address().empty()) continue;
    const bool busy = !w.job_id().empty();
    const std::vector<std::pair<std::string, std::string>> labels = {
        {"node", w.resources().node()},
        {"gpu", w.resources().gpu_index() < 0 ? "cpu" : absl::StrCat(w.resources().gpu_index())},
        {"worker", w.id()},
        {"__meta_mt_worker", w.id()},
        {"__meta_mt_state", Lower(mt::v1::WorkerState_Name(w.state()), "WORKER_STATE_")},
        {"__meta_mt_job", w.job_id()},
        {"__meta_mt_rank", busy ? absl::StrCat(w.rank()) : ""}};
    absl::StrAppend(&out, first ? "" : ",", "{\"targets\":[", JsonQuote(w.metrics_address()),
                    "],\"labels\":{");
    for (size_t i = 0; i < labels.size(); ++i) {
      absl::StrAppend(&out, i ? "," : "", JsonQuote(labels[i].first), ":",
                      JsonQuote(labels[i].second));
    }
    absl::StrAppend(&out, "}}");
    first = false;
  }
  absl::StrAppend(&out, "]");
  return out;
}

}  // namespace mt::coordinator
