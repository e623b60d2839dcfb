// The coordinator daemon: owns the gRPC server, its services and the background sweeper.
//
//   MT_ASSIGN_OR_RETURN(auto server, Server::Create(config, &clock));
//   server->Wait();            // until Shutdown() from a signal handler thread
//
// Thread-safe: Shutdown() may be called from any thread, once or more.
#ifndef MT_COORDINATOR_SERVER_H_
#define MT_COORDINATOR_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/base/confine.h"
#include "coordinator/config.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"

namespace mt::coordinator {

class WorkerRegistry;
class Store;
class JobManager;
class RankCredentials;
}  // namespace mt::coordinator
namespace mt::rpc {
class Authenticator;
}  // namespace mt::rpc
namespace mt::coordinator {
class ClientServiceImpl;
class WorkerServiceImpl;
class CoordinatorMetrics;
class CheckpointCatalog;
class JobManagerCheckpointJobs;

class Server {
 public:
  // Validates the config, binds the port and starts serving. `clock` outlives the server.
  static absl::StatusOr<std::unique_ptr<Server>> Create(const CoordinatorConfig& config,
                                                        const Clock* clock);
  ~Server();

  // The address actually bound (resolves port 0).
  const std::string& address() const { return address_; }
  // Blocks until Shutdown().
  void Wait();
  // Stops accepting calls, ends open streams, waits for handlers to finish.
  void Shutdown();

 private:
  Server() = default;
  // Create's parts, in order. The store, the worker registry (persisted) and the ranks'
  // credentials from the state directory. The job manager, the two gRPC services and the
  // checkpoint catalog. The gRPC server, started (returns the bound port). /metrics and /sd,
  // when a metrics port is set.
  absl::Status OpenState();
  absl::Status CreateServices();
  absl::StatusOr<int> Listen(const std::shared_ptr<grpc::ServerCredentials>& credentials);
  absl::Status ServeMetrics();
  void SweepLoop();
  // The checkpoint catalog over the store and the job manager, handed to the services.
  absl::Status StartCatalog();
  // Moves restarting jobs on (JobManager::AdvanceRestarts); a thread of its own, as verifying
  // a large checkpoint takes a while and must not delay the detection of lost workers.
  void RestartLoop();

  CoordinatorConfig config_;
  const Clock* clock_ = nullptr;
  std::string address_;
  absl::Time start_time_;
  std::unique_ptr<rpc::Authenticator> auth_;
  std::unique_ptr<Store> store_;
  AllowedRoots allowed_roots_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<RankCredentials> rank_credentials_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<JobManagerCheckpointJobs> checkpoint_jobs_;
  std::unique_ptr<CheckpointCatalog> catalog_;
  // Declared after the components it reads, so that its endpoint stops before they go.
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<ClientServiceImpl> client_service_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<bool> shutdown_called_{false};
  absl::Notification stopping_;
  std::thread sweeper_;
  std::thread restarter_;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_SERVER_H_
