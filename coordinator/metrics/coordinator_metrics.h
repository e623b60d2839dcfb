// The coordinator's Prometheus metrics (docs/metrics.md) and its HTTP service discovery:
//   - job and worker counts by state, the queue length: read from the job manager and the
//     worker registry at scrape time (always current, no bookkeeping);
//   - restarts, finished jobs and scheduling latency: from job state transitions (JobObserver);
//   - the last `mtctl eval` result per job whose checkpoint was evaluated and per weights
//     (none or int8, `mtctl eval --quantize`): from the eval job's transition to SUCCEEDED
//     (labelled by the training job, like the workers' series);
//   - RPC latency by service, method and code: a gRPC server interceptor;
//   - /sd: Prometheus HTTP service discovery of the live workers' metrics endpoints.
// No label is unbounded: states, methods and codes are fixed sets; nodes are the cluster's;
// jobs are those the coordinator keeps (a deleted job's eval series go with it).
//
//   auto metrics = std::make_unique<CoordinatorMetrics>();
//   options.observer = metrics.get();                      // before the job manager exists
//   builder.experimental().SetInterceptorCreators(metrics->InterceptorFactories());
//   MT_RETURN_IF_ERROR(metrics->Serve(server_options, jobs, registry));
//
// Thread-safe.
#ifndef MT_COORDINATOR_METRICS_COORDINATOR_METRICS_H_
#define MT_COORDINATOR_METRICS_COORDINATOR_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metrics_server.h"
#include "coordinator/jobs/job_observer.h"
#include "grpcpp/support/server_interceptor.h"
#include "mt/v1/job.pb.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace mt::coordinator {

class EvalResults;
class JobManager;
class WorkerRegistry;

class CoordinatorMetrics : public JobObserver {
 public:
  CoordinatorMetrics();
  ~CoordinatorMetrics() override;

  // One factory that times every RPC (the server owns what this returns).
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
  InterceptorFactories();

  // Starts the endpoint: /metrics (this registry and the cluster state of `jobs` and
  // `registry`, which outlive this) and /sd (service discovery).
  absl::Status Serve(const metrics::MetricsServerOptions& options, JobManager* jobs,
                     WorkerRegistry* registry);
  // "http://host:port/metrics" and ".../sd" ("https://" with TLS); empty before Serve.
  std::string metrics_url();
  std::string sd_url();
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }
  // What /metrics serves besides the cluster state: the registry and the eval results.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

  void OnJobTransition(const mt::v1::Job& job, mt::v1::JobState from, mt::v1::JobState to,
                       absl::Time now) override;
  // Drops the job's `mtctl eval` series (those labelled by it) and its scheduling timer.
  void OnJobDeleted(const mt::v1::Job& job) override;

  // Records one finished RPC (the interceptor's entry point; public for tests).
  void ObserveRpc(const std::string& full_method, int code, double seconds);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* restarts_;
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Histogram* scheduling_latency_;
  prometheus::Family<prometheus::Histogram>* rpc_seconds_;
  // `mtctl eval` results, by the job that saved the evaluated checkpoint (coordinator_metrics.cc).
  std::shared_ptr<EvalResults> eval_results_;
  prometheus::Counter* eval_tokens_;

  absl::Mutex mu_;
  std::unique_ptr<metrics::MetricsServer> server_ ABSL_GUARDED_BY(mu_);
  // When each job (re-)entered PENDING after a transition (a job submitted as PENDING is
  // timed from its create_time). Entries go when the job is scheduled or ends.
  std::map<std::string, absl::Time> pending_since_ ABSL_GUARDED_BY(mu_);
};

// Prometheus HTTP service discovery (https://prometheus.io/docs/prometheus/latest/http_sd/):
// one target group per live worker (IDLE, BUSY or DRAINING) that serves metrics, with target
// labels node, gpu, worker and the meta labels __meta_mt_worker, __meta_mt_state,
// __meta_mt_job and __meta_mt_rank (the job and rank it runs; empty when idle).
std::string ServiceDiscoveryJson(const std::vector<mt::v1::Worker>& workers);

// "UNAVAILABLE" for 14; codes outside 0..16 are "UNKNOWN".
std::string GrpcCodeName(int code);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_METRICS_COORDINATOR_METRICS_H_
