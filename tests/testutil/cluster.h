// A real mt cluster on loopback for cross-process tests: one mt-coordinator and any number of
// mt-worker daemons, each a real process, plus helpers to call the API and run mtctl.
// Not thread-safe: one test thread drives a Cluster.
#ifndef MT_TESTS_TESTUTIL_CLUSTER_H_
#define MT_TESTS_TESTUTIL_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mt/v1/client_service.grpc.pb.h"
#include "tests/testutil/subprocess.h"

namespace mt::testutil {

class Cluster {
 public:
  // `bin_dir` holds mt-coordinator, mt-worker, mt-train and mtctl.
  explicit Cluster(std::string bin_dir);
  ~Cluster();

  const std::string& dir() const { return dir_; }
  const std::string& address() const { return address_; }

  // Starts (or restarts, on the same port and state dir) the coordinator, its metrics endpoint
  // on any free port (GetClusterInfo's metrics_url names it).
  absl::Status StartCoordinator(const std::vector<std::string>& extra_flags = {});
  void KillCoordinator(int sig);
  // The coordinator's process (e.g. to SIGSTOP it), null before StartCoordinator.
  Subprocess* coordinator() { return coordinator_.get(); }
  // Starts a CPU worker daemon named `name` (its node is `node`). Its metrics endpoint is on
  // any free port (the coordinator's service discovery names it). Its log is `name`.log.
  absl::Status StartWorker(const std::string& name, const std::string& node = "node0",
                           const std::vector<std::string>& extra_flags = {});
  // The same for GPU `gpu` of its node (-1: the CPU worker above).
  absl::Status StartWorker(const std::string& name, const std::string& node, int gpu,
                           const std::vector<std::string>& extra_flags = {});
  Subprocess* worker(const std::string& name) { return workers_[name].get(); }
  // Waits until `n` workers are IDLE.
  bool WaitForIdleWorkers(int n, absl::Duration timeout);

  // SubmitJob over the API, as it is (no client-side path resolution).
  absl::StatusOr<mt::v1::Job> SubmitJob(const mt::v1::JobSpec& spec);
  absl::StatusOr<mt::v1::Job> GetJob(const std::string& id, bool events = false);
  // With `token`, the call carries it as its bearer token (the cluster's own calls carry none).
  absl::StatusOr<mt::v1::ListWorkersResponse> ListWorkers(const std::string& token = "");
  // Polls until the job is in `state` (true) or a terminal state / the timeout (false).
  bool WaitForState(const std::string& id, mt::v1::JobState state, absl::Duration timeout);
  CommandResult Mtctl(std::vector<std::string> args, absl::Duration timeout = absl::Seconds(60));
  std::string Log(const std::string& name);

 private:
  std::string bin_;
  std::string dir_;
  std::string address_;
  std::unique_ptr<Subprocess> coordinator_;
  std::map<std::string, std::unique_ptr<Subprocess>> workers_;
  std::unique_ptr<mt::v1::ClientService::Stub> stub_;
};

// Writes a Megatron indexed dataset of `documents` documents of `tokens_per_doc` tokens that
// repeat a short phrase (easy to learn: the loss falls fast). Returns the prefix.
std::string WriteRepetitiveDataset(const std::string& dir, int documents, int tokens_per_doc);

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_CLUSTER_H_
