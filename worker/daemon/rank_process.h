// One supervised trainer process: `<trainer> --assignment FILE`, run in its own process
// group with its output in a log file, its reports read from a pipe, and its end reported
// once. A crash, CUDA error or NCCL abort in the trainer never reaches the daemon.
//
// Lifecycle: Start -> (reports ...) -> exit -> on_exit(report) exactly once.
// Stop(grace): SIGTERM to the process group, SIGKILL after `grace` if it is still there; the
// outcome is then STOPPED whatever the exit code.
// Thread-safe: Stop may be called from any thread; callbacks run on internal threads.
#ifndef MT_WORKER_DAEMON_RANK_PROCESS_H_
#define MT_WORKER_DAEMON_RANK_PROCESS_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "mt/v1/worker_service.pb.h"

namespace mt::worker {

struct RankProcessOptions {
  // The trainer binary, run as `<trainer> --assignment FILE` (normally mt-train).
  std::string trainer_binary;
  // Parent of the per-rank directories (assignment, log).
  std::string work_dir;
  // Lines of the log kept for the exit report.
  int log_tail_lines = 50;
  // NAME=VALUE pairs added to the trainer's environment (e.g. MT_TOKEN_FILE).
  std::vector<std::string> extra_env;
};

class RankProcess {
 public:
  using ReportFn = std::function<void(const mt::v1::RankReport&)>;
  using ExitFn = std::function<void(const mt::v1::RankExitReport&)>;

  static absl::StatusOr<std::unique_ptr<RankProcess>> Start(const mt::v1::Assignment& assignment,
                                                            const std::string& worker_id,
                                                            const RankProcessOptions& options,
                                                            ReportFn on_report, ExitFn on_exit);
  // Kills the process group if it still runs and waits for the internal threads.
  ~RankProcess();

  void Stop(absl::Duration grace);
  bool exited() const { return exited_.HasBeenNotified(); }
  bool WaitForExit(absl::Duration timeout) {
    return exited_.WaitForNotificationWithTimeout(timeout);
  }
  const mt::v1::Assignment& assignment() const { return assignment_; }
  const std::string& log_path() const { return log_path_; }
  pid_t pid() const { return pid_; }

 private:
  void SignalTrainer(int signal) const;
  RankProcess() = default;
  void ReadReports(int fd);
  void WaitChild();

  mt::v1::Assignment assignment_;
  std::string worker_id_;
  RankProcessOptions options_;
  std::string log_path_;
  pid_t pid_ = -1;
  ReportFn on_report_;
  ExitFn on_exit_;
  std::atomic<bool> stop_requested_{false};
  absl::Notification exited_;
  absl::Mutex mu_;
  mt::v1::Progress last_progress_ ABSL_GUARDED_BY(mu_);
  std::thread reader_;
  std::thread waiter_;
  std::thread killer_ ABSL_GUARDED_BY(mu_);
};

// The last `n` lines of a file (at most the last 1 MiB is read).
std::vector<std::string> TailLines(const std::string& path, int n);

}  // namespace mt::worker

#endif  // MT_WORKER_DAEMON_RANK_PROCESS_H_
