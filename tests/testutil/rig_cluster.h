// A real mt cluster spread over network namespaces (netns_rig.h), as an operator runs it off
// loopback: the coordinator on node 0 (10.77.0.1:7070, or [fd00:77::1]:7070) with a bearer
// token and TLS (certificates made by openssl at test time), mtctl on node 1, and CPU worker
// daemons on nodes 2.. ("node2", "node3", ...; worker w of node n is "node<n+2>-w<w>", with a
// state file that keeps its id across restarts). Shared by tests/multinode and tests/chaos.
// Needs root for `ip netns`; Create says why when it cannot. Not thread-safe: one thread drives
// a RigCluster.
#ifndef MT_TESTS_TESTUTIL_RIG_CLUSTER_H_
#define MT_TESTS_TESTUTIL_RIG_CLUSTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "mt/v1/job.pb.h"
#include "tests/testutil/certs.h"
#include "tests/testutil/netns_rig.h"
#include "tests/testutil/subprocess.h"

namespace mt::testutil {

struct RigClusterOptions {
  int worker_nodes = 2;
  bool ipv6 = false;  // the coordinator listens on fd00:77::1 only
  // Added to the coordinator's flags (after the rig's own, so they win).
  std::vector<std::string> coordinator_flags;
  // NAME=VALUE pairs added to the coordinator's environment.
  std::vector<std::string> coordinator_env;
  // Prefix of the namespaces' names (netns_rig.h) and of the temporary directory.
  std::string prefix = "mt";
};

class RigCluster {
 public:
  static constexpr int kCoordinatorNode = 0;
  static constexpr int kClientNode = 1;
  static constexpr int kFirstWorkerNode = 2;

  // Creates the namespaces, the token and the certificates; starts no daemon. `bin_dir` holds
  // mt-coordinator, mt-worker, mt-train and mtctl.
  static absl::StatusOr<std::unique_ptr<RigCluster>> Create(const std::string& bin_dir,
                                                            const RigClusterOptions& options);
  ~RigCluster();  // kills every daemon it started (SIGKILL), then removes the namespaces

  NetnsRig& rig() { return rig_; }
  const std::string& dir() const { return dir_; }
  const std::string& address() const { return address_; }

  // Starts (or starts again, on the same address and state dir) the coordinator.
  absl::Status StartCoordinator();
  Subprocess* coordinator() { return coordinator_.get(); }
  // Starts worker `w` of worker node `n` (0-based; namespace kFirstWorkerNode + n).
  absl::Status StartWorker(int n, int w);
  Subprocess* worker(const std::string& name);
  static std::string NodeName(int n);              // "node<n+2>"
  static std::string WorkerName(int n, int w);     // "node<n+2>-w<w>"
  std::string WorkDir(const std::string& worker);  // the daemon's --work_dir

  // mtctl ARGS from the client node; exit code -1 with the reason when it could not run.
  CommandResult Mtctl(std::vector<std::string> args, absl::Duration timeout = absl::Seconds(60));
  // IDLE workers (`mtctl workers`), -1 when the coordinator does not answer.
  int IdleWorkers();
  absl::StatusOr<mt::v1::Job> Describe(const std::string& id);
  bool WaitForState(const std::string& id, const std::string& state, absl::Duration timeout);
  // Writes `yaml` to `file` in dir() and submits it; the job id. UNAVAILABLE when mtctl could
  // not reach the coordinator (exit 4 or 6, or it did not run: try again), INVALID_ARGUMENT
  // for any other refusal; the message is mtctl's.
  absl::StatusOr<std::string> Submit(const std::string& yaml, const std::string& file);
  // The last `lines` lines of NAME.log in dir(), headed by the name (for failure messages).
  std::string Log(const std::string& name, int lines = 30);

 private:
  RigCluster(NetnsRig rig, std::string bin, std::string dir, RigClusterOptions options)
      : rig_(std::move(rig)),
        bin_(std::move(bin)),
        dir_(std::move(dir)),
        options_(std::move(options)) {}

  NetnsRig rig_;
  std::string bin_, dir_, token_file_, address_;
  RigClusterOptions options_;
  TestCerts certs_;
  std::unique_ptr<Subprocess> coordinator_;
  std::map<std::string, std::unique_ptr<Subprocess>> workers_;
};

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_RIG_CLUSTER_H_
