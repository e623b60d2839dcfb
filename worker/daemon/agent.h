// The mt-worker daemon: registers with the coordinator, heartbeats, re-registers after the
// coordinator restarts or declares it lost, runs the ranks it is assigned as supervised
// trainer processes (rank_process.h), forwards their progress, reports how they ended, and
// deregisters on shutdown (stopping its ranks first).
//
// Rank processes run mt-train (worker/train); the daemon itself never links LibTorch.
//
// Connection states (one loop, agent.cc):
//   DISCONNECTED --Register ok--> REGISTERED --Heartbeat known=false--> DISCONNECTED
//   DISCONNECTED --Register fails--> DISCONNECTED after a backoff (0.2 s doubling to
//                                    kMaxRegisterBackoff)
//   any --Shutdown--> Deregister (best effort) and exit
// Register waits (5 s at most) for the channel to connect, and the channel tries again at
// least every second (common/rpc/auth.h): the daemon is back within about a second of its
// coordinator's restart, naming its running ranks (the coordinator keeps them).
// Shutdown is bounded whether or not the coordinator answers: calls in flight are cancelled,
// the ranks get their grace to stop (and save), then the goodbye (deregistration, exit
// reports, the report stream's end) gets at most kGoodbye.
// Reports of saves and loads (the coordinator's catalog) that cannot be delivered (the
// coordinator is away) are kept, up to kMaxUndelivered, and sent once it is back; progress is
// best effort (the next report supersedes it). A rank's exit report is retried until the
// coordinator takes it, however long it is away, at once when the daemon registers again; a
// refusal (unknown job, ...) is final only when it lasts kRefusalGrace while registered.
// Thread-safe: Run() on one thread, Shutdown() from any.
#ifndef MT_WORKER_DAEMON_AGENT_H_
#define MT_WORKER_DAEMON_AGENT_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/confine.h"
#include "common/rpc/tls.h"
#include "mt/v1/worker_service.grpc.pb.h"
#include "worker/daemon/rank_observer.h"
#include "worker/daemon/rank_process.h"

namespace mt::worker {

struct AgentConfig {
  // Coordinator host:port.
  std::string coordinator = "127.0.0.1:7070";
  // Bearer token file (first token is sent); empty = none.
  std::string token_file;
  // TLS to the coordinator (--tls-ca; --tls-cert/--tls-key for mutual TLS), handed on to the
  // ranks through MT_TLS_* (common/rpc/tls.h).
  rpc::ClientTlsFiles tls;
  // Send the token to a non-loopback coordinator without TLS.
  bool insecure_allow_plaintext = false;
  // Node name; empty = this host's name.
  std::string node;
  // GPU index this daemon serves; -1 = a CPU slot.
  int gpu_index = -1;
  // CPU cores the rank may use; 0 = all of this machine's.
  int cpu_cores = 0;
  // Where the worker id and its credential are kept across daemon restarts (state_file.h;
  // mode 0600); empty = not kept.
  std::string state_file;
  // Per-rank directories (assignment, trainer log); default /tmp/mt-worker-<pid>.
  std::string work_dir;
  // The trainer binary (`train --assignment FILE`); default this executable.
  std::string trainer_binary;
  // host:port of this daemon's Prometheus endpoint, told to the coordinator for its service
  // discovery; empty = metrics off.
  std::string metrics_address;
  // NAME=VALUE added to every rank's environment: the network choice (common/net/interfaces.h:
  // MT_ADVERTISE_HOST, MT_SOCKET_IFNAME, NCCL_SOCKET_IFNAME, MT_RANK_PORT_RANGE, ...).
  std::vector<std::string> rank_environment;
  // --allowed-root (repeatable): every path of an assigned rank's spec, and its resume_from,
  // must resolve into one of these (assignment_paths.h); a rank whose paths do not is not
  // started and is reported FAILED with the reason. Empty = only the coordinator's roots (sent
  // with each assignment) confine.
  std::vector<std::string> allowed_roots;

  absl::Status Validate() const;
};

class Agent {
 public:
  static constexpr absl::Duration kGoodbye = absl::Seconds(2);
  static constexpr size_t kMaxUndelivered = 1024;
  static constexpr absl::Duration kMaxRegisterBackoff = absl::Seconds(1);
  static constexpr absl::Duration kRefusalGrace = absl::Seconds(5);

  // `observer` (optional, outlives the agent) hears of every rank's start, reports and end.
  static absl::StatusOr<std::unique_ptr<Agent>> Create(const AgentConfig& config,
                                                       RankObserver* observer = nullptr);

  // Serves until Shutdown(); returns OK after a clean deregistration.
  absl::Status Run();
  void Shutdown();
  // The id the coordinator gave, empty before the first registration.
  std::string worker_id() const;
  // Ranks running now.
  std::vector<mt::v1::RunningRank> Running() const;

 private:
  Agent(AgentConfig config, mt::v1::WorkerResources resources,
        std::shared_ptr<grpc::Channel> channel, RankObserver* observer);
  absl::Status RegisterOnce();
  // A call's context: deadline `timeout` from now (none when zero) and this registration's
  // session (rpc::kWorkerSessionHeader).
  void Prepare(grpc::ClientContext* context, absl::Duration timeout) const;
  // Keeps one StreamAssignments call open while registered and acts on what arrives.
  void AssignmentLoop();
  void Handle(const mt::v1::WorkerCommand& command);
  void ForwardReport(const mt::v1::RankReport& report);
  // Writes to the report stream, reopening it once. False when the coordinator is away.
  bool WriteReport(const mt::v1::RankReport& report) ABSL_EXCLUSIVE_LOCKS_REQUIRED(report_mu_);
  // Sends the kept reports, oldest first; true when none is left.
  bool FlushUndelivered() ABSL_EXCLUSIVE_LOCKS_REQUIRED(report_mu_);
  // Registers a call's context for cancellation (by Shutdown when `at_shutdown`, else at the
  // goodbye's deadline); false (nothing registered) when that moment has passed.
  bool Track(grpc::ClientContext* context, bool at_shutdown);
  void Untrack(grpc::ClientContext* context);
  void ReportExit(const mt::v1::RankExitReport& report);
  // Sends an exit report until the coordinator takes it (or refuses it for kRefusalGrace while
  // this daemon is registered), whatever the outage; at once after a re-registration.
  void DeliverExit(const mt::v1::RankExitReport& report);
  // Whether `s` is the coordinator's refusal of a call (unknown job or worker, a rank it does
  // not hold here, bad credentials), not its absence.
  static bool IsRefusal(const absl::Status& s);
  // Waits `backoff`, less when the daemon registers again (the count moves past
  // `registrations`) or the goodbye's deadline passes.
  void WaitToRetry(absl::Duration backoff, int64_t registrations);
  // Destroys the processes of ranks that have ended.
  void Reap();
  void StopAllRanks(absl::Duration grace);
  // Deregistration, exit reports and the report stream's end, bounded by kGoodbye.
  void Goodbye(bool registered);

  static std::string Key(const std::string& job_id, int attempt) {
    return job_id + "/" + std::to_string(attempt);
  }

  const AgentConfig config_;
  const mt::v1::WorkerResources resources_;
  AllowedRoots allowed_roots_;  // set by Create, then read only
  RankObserver* const observer_;
  std::unique_ptr<mt::v1::WorkerService::Stub> stub_;
  absl::Notification stop_;
  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  std::string credential_ ABSL_GUARDED_BY(mu_);  // issued with the id (kept in state_file)
  std::string session_ ABSL_GUARDED_BY(mu_);     // of the current registration
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  int64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;  // successful Register calls
  grpc::ClientContext* assign_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Calls in flight (Register, Heartbeat, exit reports, the report stream), cancelled by
  // Shutdown (register and heartbeat) or at the goodbye's deadline (the rest).
  // The value: whether Shutdown cancels it (register, heartbeat) or only the goodbye's deadline.
  std::map<grpc::ClientContext*, bool> calls_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* report_call_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::atomic<bool> give_up_{false};  // the goodbye's deadline has passed
  std::map<std::string, std::unique_ptr<RankProcess>> ranks_ ABSL_GUARDED_BY(mu_);
  // Keys of the last kRememberEnded ranks that ended here, oldest first: an assignment of one of
  // them that comes again (the coordinator re-sends one it believes lost) is not started again.
  static constexpr size_t kRememberEnded = 256;
  std::deque<std::string> ended_ ABSL_GUARDED_BY(mu_);
  // The open ReportProgress stream, reopened when it breaks.
  absl::Mutex report_mu_;
  std::unique_ptr<grpc::ClientContext> report_context_ ABSL_GUARDED_BY(report_mu_);
  std::unique_ptr<mt::v1::ReportProgressResponse> report_response_ ABSL_GUARDED_BY(report_mu_);
  std::unique_ptr<grpc::ClientWriter<mt::v1::RankReport>> report_writer_
      ABSL_GUARDED_BY(report_mu_);
  std::deque<mt::v1::RankReport> undelivered_ ABSL_GUARDED_BY(report_mu_);
  std::thread assignment_thread_;
  // Threads delivering exit reports (with retries); joined by Reap once done.
  struct ExitReporter {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<ExitReporter> exit_threads_ ABSL_GUARDED_BY(mu_);
};

// mt-train beside this executable (the default trainer of the ranks and of `mt-worker train`).
absl::StatusOr<std::string> TrainerBesideThisExecutable();

// This machine's resources for a slot: node name, device name and memory.
mt::v1::WorkerResources DetectResources(const AgentConfig& config);

// NAME=VALUE pairs that the daemon adds to the environment of each rank it starts on the slot
// `resources`: the token file, TLS files and config.rank_environment, and on a CPU slot the
// slot's cores as the thread count of LibTorch's pool (MT_CPU_THREADS) and of OpenBLAS's
// (OPENBLAS_NUM_THREADS). OpenBLAS reads its count when it loads and ignores LibTorch's
// at::set_num_threads: left alone it starts one thread per core of the machine, which spin
// (sched_yield) between calls, and the ranks of several slots of one machine took 8x longer a
// step fighting over the cores (bench/RESULTS.md, "CI time"). A variable of the daemon's own
// environment comes first in the rank's and wins (rank_process.cc).
std::vector<std::string> RankEnvironment(const AgentConfig& config,
                                         const mt::v1::WorkerResources& resources);

}  // namespace mt::worker

#endif  // MT_WORKER_DAEMON_AGENT_H_
