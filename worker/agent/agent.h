// The mt-worker daemon: registers with the coordinator, heartbeats, re-registers after the
// coordinator restarts or declares it lost, and deregisters on shutdown.
//
// Connection states (one loop, agent.cc):
//   DISCONNECTED --Register ok--> REGISTERED --Heartbeat known=false--> DISCONNECTED
//   DISCONNECTED --Register fails--> DISCONNECTED after a backoff (0.2 s doubling to 5 s)
//   any --Shutdown--> Deregister (best effort) and exit
// Thread-safe: Run() on one thread, Shutdown() from any.
#ifndef MT_WORKER_AGENT_AGENT_H_
#define MT_WORKER_AGENT_AGENT_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "mt/v1/worker_service.grpc.pb.h"

namespace mt::worker {

struct AgentConfig {
  // Coordinator host:port.
  std::string coordinator = "127.0.0.1:7070";
  // Bearer token file (first token is sent); empty = none.
  std::string token_file;
  // Node name; empty = this host's name.
  std::string node;
  // GPU index this daemon serves; -1 = a CPU slot.
  int gpu_index = -1;
  // CPU cores the rank may use; 0 = all of this machine's.
  int cpu_cores = 0;
  // Where the worker id is kept across daemon restarts; empty = not kept.
  std::string state_file;

  absl::Status Validate() const;
};

class Agent {
 public:
  static absl::StatusOr<std::unique_ptr<Agent>> Create(const AgentConfig& config);

  // Serves until Shutdown(); returns OK after a clean deregistration.
  absl::Status Run();
  void Shutdown();
  // The id the coordinator gave, empty before the first registration.
  std::string worker_id() const;

 private:
  Agent(AgentConfig config, mt::v1::WorkerResources resources, std::string token);
  absl::Status RegisterOnce();

  const AgentConfig config_;
  const mt::v1::WorkerResources resources_;
  std::unique_ptr<mt::v1::WorkerService::Stub> stub_;
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
};

// This machine's resources for a slot: node name, device name and memory.
mt::v1::WorkerResources DetectResources(const AgentConfig& config);

}  // namespace mt::worker

#endif  // MT_WORKER_AGENT_AGENT_H_
