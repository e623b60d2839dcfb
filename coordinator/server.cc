#include "coordinator/server.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/metrics/metrics_security.h"
#include "common/rpc/auth.h"
#include "common/rpc/tls.h"
#include "common/rpc/worker_credential.h"
#include "coordinator/checkpoints/catalog.h"
#include "coordinator/checkpoints/job_lookup.h"
#include "coordinator/client_service.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/metrics/coordinator_metrics.h"
#include "coordinator/store/store.h"
#include "coordinator/worker_service.h"
#include "coordinator/workers/registry.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

namespace mt::coordinator {
namespace {

// Takes server reflection off one server. Linking gRPC's reflection library registers its plugin
// for every server of the process at load time (a static initializer), so without this option
// reflection answered whatever --reflection said (issue #20).
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* args) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(
        std::remove_if(plugins->begin(), plugins->end(),
                       [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                         return dynamic_cast<grpc::reflection::ProtoServerReflectionPlugin*>(
                                    p.get()) != nullptr;
                       }),
        plugins->end());
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const CoordinatorConfig& config,
                                                       const Clock* clock) {
  MT_RETURN_IF_ERROR(config.Validate());
  std::vector<rpc::TokenEntry> tokens;
  if (!config.auth_token_file.empty()) {
    auto read = rpc::ReadTokenTable(config.auth_token_file);
    if (!read.ok()) return Annotate(read.status(), "--auth-token-file");
    tokens = *std::move(read);
  }
  MT_ASSIGN_OR_RETURN(AllowedRoots roots, AllowedRoots::Create(config.allowed_roots));
  MT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                      rpc::MakeServerCredentials(config.tls));
  std::unique_ptr<Server> s(new Server());
  s->allowed_roots_ = std::move(roots);
  s->config_ = config;
  s->clock_ = clock;
  s->auth_ = std::make_unique<rpc::Authenticator>(std::move(tokens));
  s->start_time_ = clock->Now();
  MT_RETURN_IF_ERROR(s->OpenState());
  MT_RETURN_IF_ERROR(s->CreateServices());
  MT_ASSIGN_OR_RETURN(const int bound_port, s->Listen(credentials));
  const size_t colon = config.listen_address.rfind(':');
  s->address_ = absl::StrCat(config.listen_address.substr(0, colon), ":", bound_port);
  char name[256] = {0};
  const std::string host_name =
      ::gethostname(name, sizeof(name) - 1) == 0 && name[0] ? name : "localhost";
  s->jobs_->SetCoordinatorAddress(AdvertisedAddress(config, bound_port, host_name));
  MT_LOG(INFO) << "workers and ranks are told to dial "
               << AdvertisedAddress(config, bound_port, host_name);
  MT_RETURN_IF_ERROR(s->ServeMetrics());
  s->sweeper_ = std::thread([raw = s.get()] { raw->SweepLoop(); });
  s->restarter_ = std::thread([raw = s.get()] { raw->RestartLoop(); });
  MT_LOG(INFO) << "mt-coordinator listening on " << s->address_
               << (config.tls.enabled() ? " over TLS" : "")
               << (config.tls.client_ca.empty() ? "" : " (client certificates required)")
               << (s->auth_->enabled() ? " (bearer tokens required)" : "")
               << (s->allowed_roots_.enabled()
                       ? absl::StrCat(", paths confined to ",
                                      absl::StrJoin(s->allowed_roots_.roots(), ", "))
                       : "");
  return s;
}

absl::Status Server::OpenState() {
  MT_ASSIGN_OR_RETURN(store_, Store::Open(config_.state_dir));
  registry_ = std::make_unique<WorkerRegistry>(clock_, config_.lost_after);
  // Worker ids and their credentials outlive a restart (registry.h).
  MT_RETURN_IF_ERROR(registry_->Persist(store_.get()));
  // The key of the ranks' rendezvous credentials, made once per state directory.
  MT_ASSIGN_OR_RETURN(const std::string rank_key,
                      store_->GetOrPutMeta("rank_credential_key", rpc::NewWorkerSecret()));
  MT_ASSIGN_OR_RETURN(RankCredentials rank_credentials, RankCredentials::FromKey(rank_key));
  rank_credentials_ = std::make_unique<RankCredentials>(std::move(rank_credentials));
  return absl::OkStatus();
}

absl::Status Server::CreateServices() {
  // The address workers and ranks use to reach us: known once the port is bound, so the job
  // manager is created after binding but before the first call can need it.
  JobManagerOptions jm;
  jm.stop_grace_seconds = config_.stop_grace_seconds;
  jm.coordinator_address = config_.listen_address;
  if (config_.metrics_port >= 0) metrics_ = std::make_unique<CoordinatorMetrics>();
  jm.observer = metrics_.get();
  jm.rank_credentials = rank_credentials_.get();
  jm.allowed_roots = allowed_roots_.roots();
  MT_ASSIGN_OR_RETURN(jobs_, JobManager::Create(store_.get(), registry_.get(), clock_, jm));
  client_service_ = std::make_unique<ClientServiceImpl>(auth_.get(), registry_.get(), jobs_.get(),
                                                        clock_, start_time_);
  worker_service_ = std::make_unique<WorkerServiceImpl>(auth_.get(), registry_.get(), jobs_.get(),
                                                        config_.heartbeat_interval);
  worker_service_->set_rank_credentials(rank_credentials_.get());
  client_service_->set_metrics(metrics_.get());
  client_service_->set_allowed_roots(allowed_roots_);
  return StartCatalog();
}

absl::StatusOr<int> Server::Listen(const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  grpc::EnableDefaultHealthCheckService(true);
  if (config_.ReflectionEnabled()) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  rpc::AllowKeepalivePings(&builder);
  if (!config_.ReflectionEnabled()) builder.SetOption(std::make_unique<WithoutReflection>());
  int bound_port = 0;
  builder.AddListeningPort(config_.listen_address, credentials, &bound_port);
  builder.RegisterService(client_service_.get());
  builder.RegisterService(worker_service_.get());
  builder.SetMaxReceiveMessageSize(16 << 20);
  if (metrics_ != nullptr) {
    builder.experimental().SetInterceptorCreators(metrics_->InterceptorFactories());
  }
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config_.listen_address,
                     " (address in use or not local?); choose another with --listen"));
  }
  return bound_port;
}

absl::Status Server::ServeMetrics() {
  if (metrics_ == nullptr) return absl::OkStatus();
  metrics::MetricsServerOptions options;
  options.host = config_.metrics_host;
  options.port = config_.metrics_port;
  MT_RETURN_IF_ERROR(
      metrics::ApplyMetricsSecurity({config_.metrics_token_file, config_.metrics_tls_cert,
                                     config_.metrics_tls_key, config_.metrics_public},
                                    "/metrics and /sd", &options));
  MT_RETURN_IF_ERROR(metrics_->Serve(options, jobs_.get(), registry_.get()));
  MT_LOG(INFO) << "metrics on " << metrics_->metrics_url() << ", service discovery on "
               << metrics_->sd_url();
  return absl::OkStatus();
}

absl::Status Server::StartCatalog() {
  checkpoint_jobs_ = std::make_unique<JobManagerCheckpointJobs>(jobs_.get());
  MT_ASSIGN_OR_RETURN(catalog_, CheckpointCatalog::Create(store_.get(), checkpoint_jobs_.get(),
                                                          clock_, allowed_roots_));
  client_service_->set_catalog(catalog_.get());
  worker_service_->set_catalog(catalog_.get());
  return absl::OkStatus();
}

Server::~Server() {
  Shutdown();
  if (sweeper_.joinable()) sweeper_.join();
  if (restarter_.joinable()) restarter_.join();
}

void Server::RestartLoop() {
  const absl::Duration period = std::max(absl::Milliseconds(100), config_.heartbeat_interval / 2);
  while (!stopping_.WaitForNotificationWithTimeout(period)) {
    jobs_->CheckHangs();
    jobs_->AdvanceRestarts();
  }
}

void Server::SweepLoop() {
  const absl::Duration period = std::max(absl::Milliseconds(100), config_.heartbeat_interval / 2);
  int64_t passes = 0;
  while (!stopping_.WaitForNotificationWithTimeout(period)) {
    for (const std::string& id : registry_->SweepLost()) {
      MT_LOG(WARNING) << "worker " << id << " lost: no heartbeat for over "
                      << absl::FormatDuration(config_.lost_after);
      jobs_->OnWorkerLost(id);
    }
    // After a restart, workers get `lost_after` plus their reconnect backoff (about 1 s,
    // worker/daemon/agent.h; 10 s for margin) to come back with their ranks before those
    // count as gone.
    if (clock_->Now() - start_time_ > config_.lost_after + absl::Seconds(10)) {
      jobs_->FailOrphans();
    }
    // Retention every ~10 s (it walks every job).
    if (++passes % 20 == 0) {
      const int n = jobs_->PruneEnded(config_.keep_ended_jobs, config_.ended_job_ttl);
      if (n > 0) MT_LOG(INFO) << "retention deleted " << n << " ended jobs";
      // Saves left WRITING by a job that ended or moved on (catalog.h).
      if (catalog_ != nullptr) {
        const int settled = catalog_->ResolveStaleWriting();
        if (settled > 0) MT_LOG(INFO) << "settled " << settled << " WRITING checkpoints";
      }
    }
  }
}

void Server::Wait() { server_->Wait(); }

void Server::Shutdown() {
  if (shutdown_called_.exchange(true)) return;
  stopping_.Notify();
  // A Create that failed part way destroys a server without some of these.
  if (jobs_ != nullptr) jobs_->Shutdown();  // wakes streams and waiters so that they return
  // Give in-flight calls a moment, then cancel what is still open (e.g. streams).
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
}

}  // namespace mt::coordinator
