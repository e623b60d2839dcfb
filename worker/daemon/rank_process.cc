#include "worker/daemon/rank_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/errors.h"
#include "common/base/files.h"
#include "common/base/logging.h"
#include "common/base/paths.h"
#include "common/base/status_macros.h"
#include "worker/report/report_channel.h"

extern char** environ;

namespace mt::worker {
namespace {

// The trainer's descriptor for reports (the write end of the pipe, dup2'ed there).
constexpr int kChildReportFd = 3;
constexpr char kAssignmentFile[] = "assignment.pb";  // the trainer's --assignment

// <work_dir>/<job>-a<attempt>-r<rank>/ with assignment.pb in it (0600: it holds the rank's
// rendezvous credential); returns the directory.
absl::StatusOr<std::string> WriteAssignment(const mt::v1::Assignment& assignment,
                                            const std::string& work_dir) {
  const std::string dir =
      JoinPath(work_dir, absl::StrCat(assignment.job_id(), "-a", assignment.attempt(), "-r",
                                      assignment.coordinates().rank()));
  if (::mkdir(work_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus("work dir", work_dir, errno);
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus("rank dir", dir, errno);
  }
  MT_RETURN_IF_ERROR(WriteFileAtomically(JoinPath(dir, kAssignmentFile),
                                         assignment.SerializeAsString(), /*mode=*/0600));
  return dir;
}

// The daemon's environment for the trainer: MT_REPORT_FD set to kChildReportFd, the options'
// extra variables added, and CUDA_VISIBLE_DEVICES set to the assigned GPU, if any.
std::vector<std::string> TrainerEnvironment(const mt::v1::Assignment& assignment,
                                            const RankProcessOptions& options) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "MT_REPORT_FD=", 13) == 0) continue;
    if (assignment.gpu_index() >= 0 && std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) == 0) continue;
    env.emplace_back(*e);
  }
  env.push_back(absl::StrCat(kReportFdEnv, "=", kChildReportFd));
  for (const auto& kv : options.extra_env) env.push_back(kv);
  if (assignment.gpu_index() >= 0) {
    env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", assignment.gpu_index()));
  }
  return env;
}

// In the forked child: only async-signal-safe calls. Its own session, killed with the daemon,
// stdin from /dev/null, stdout and stderr to the log, reports to kChildReportFd; then exec.
[[noreturn]] void ExecTrainer(char* const* argv, char* const* envp, int log_fd, int report_fd) {
  ::setsid();  // own process group: a stop reaches the trainer's children too
  // A rank must not outlive its daemon (a lost worker's job is restarted elsewhere). The
  // forking thread is the daemon's long-lived assignment thread.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  int devnull = ::open("/dev/null", O_RDONLY);
  ::dup2(devnull, STDIN_FILENO);
  ::dup2(log_fd, STDOUT_FILENO);
  ::dup2(log_fd, STDERR_FILENO);
  ::dup2(report_fd, kChildReportFd);  // dup2 clears O_CLOEXEC on the new descriptor
  ::execve(argv[0], argv, envp);
  const char msg[] = "exec of the trainer failed\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
  (void)ignored;
  ::_exit(127);
}

}  // namespace

std::vector<std::string> TailLines(const std::string& path, int n) {
  std::vector<std::string> out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st;
  ::fstat(fd, &st);
  const off_t keep = std::min<off_t>(st.st_size, 1 << 20);
  std::string buf(static_cast<size_t>(keep), '\0');
  ssize_t r = ::pread(fd, buf.data(), buf.size(), st.st_size - keep);
  ::close(fd);
  if (r <= 0) return out;
  buf.resize(static_cast<size_t>(r));
  std::vector<std::string> lines = absl::StrSplit(buf, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  const size_t start = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0;
  for (size_t i = start; i < lines.size(); ++i) out.push_back(std::move(lines[i]));
  return out;
}

absl::StatusOr<std::unique_ptr<RankProcess>> RankProcess::Start(
    const mt::v1::Assignment& assignment, const std::string& worker_id,
    const RankProcessOptions& options, ReportFn on_report, ExitFn on_exit) {
  std::unique_ptr<RankProcess> p(new RankProcess());
  p->assignment_ = assignment;
  p->worker_id_ = worker_id;
  p->options_ = options;
  p->on_report_ = std::move(on_report);
  p->on_exit_ = std::move(on_exit);

  MT_ASSIGN_OR_RETURN(const std::string dir, WriteAssignment(assignment, options.work_dir));
  p->log_path_ = JoinPath(dir, "trainer.log");

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  int log_fd = ::open(p->log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    return absl::InternalError(absl::StrCat("cannot open ", p->log_path_));
  }
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> env_strings = TrainerEnvironment(assignment, options);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = {options.trainer_binary, "--assignment",
                                   JoinPath(dir, kAssignmentFile)};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::close(log_fd);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) ExecTrainer(argv.data(), envp.data(), log_fd, pipe_fds[1]);
  ::close(pipe_fds[1]);
  ::close(log_fd);
  p->pid_ = pid;
  RankProcess* raw = p.get();
  p->reader_ = std::thread([raw, fd = pipe_fds[0]] { raw->ReadReports(fd); });
  p->waiter_ = std::thread([raw] { raw->WaitChild(); });
  MT_LOG(INFO) << "started rank " << assignment.coordinates().rank() << " of "
               << assignment.job_id() << " (pid " << pid << ", log " << p->log_path_ << ")";
  return p;
}

void RankProcess::ReadReports(int fd) {
  while (true) {
    auto report = ReadReport(fd);
    if (!report.ok()) {
      MT_LOG(WARNING) << assignment_.job_id() << ": " << report.status().message();
      break;
    }
    if (!report->has_value()) break;
    mt::v1::RankReport& r = **report;
    // The daemon, not the trainer, vouches for who is reporting.
    r.set_worker_id(worker_id_);
    r.set_job_id(assignment_.job_id());
    r.set_attempt(assignment_.attempt());
    r.set_rank(assignment_.coordinates().rank());
    if (r.has_progress()) {
      absl::MutexLock lock(&mu_);
      last_progress_ = r.progress();
    }
    on_report_(r);
  }
  ::close(fd);
}

void RankProcess::WaitChild() {
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  // Take down anything the trainer left in its group.
  ::kill(-pid_, SIGKILL);
  if (reader_.joinable()) reader_.join();
  mt::v1::RankExitReport report;
  report.set_worker_id(worker_id_);
  report.set_job_id(assignment_.job_id());
  report.set_attempt(assignment_.attempt());
  report.set_rank(assignment_.coordinates().rank());
  int code = 0;
  std::string how;
  if (WIFEXITED(status)) {
    code = WEXITSTATUS(status);
    how = absl::StrCat("exit code ", code);
  } else if (WIFSIGNALED(status)) {
    code = -WTERMSIG(status);
    how =
        absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  report.set_exit_status(code);
  report.set_message(how);
  if (stop_requested_) {
    report.set_outcome(mt::v1::RANK_OUTCOME_STOPPED);
  } else if (code == 0) {
    report.set_outcome(mt::v1::RANK_OUTCOME_SUCCEEDED);
  } else {
    report.set_outcome(mt::v1::RANK_OUTCOME_FAILED);
    // The trainer's last line usually says why; put it in the message.
    auto tail = TailLines(log_path_, 1);
    if (!tail.empty()) report.set_message(absl::StrCat(how, ": ", tail.back().substr(0, 500)));
  }
  for (auto& line : TailLines(log_path_, options_.log_tail_lines)) report.add_log_tail(line);
  {
    absl::MutexLock lock(&mu_);
    *report.mutable_final_progress() = last_progress_;
  }
  exited_.Notify();
  on_exit_(report);
}

// The trainer's group, and the trainer itself: a child stopped (or not yet scheduled) between
// fork and its setsid has no group of its own yet, so the group's signal alone would miss it and
// the worker would wait for it forever (seen with a rank SIGSTOPped as it was forked).
// Never with a pid of 0 or -1 (no child was started): kill() would signal this whole process
// group, or every process this user may signal.
void RankProcess::SignalTrainer(int signal) const {
  if (pid_ <= 0) return;
  ::kill(-pid_, signal);
  ::kill(pid_, signal);
}

void RankProcess::Stop(absl::Duration grace) {
  if (exited() || stop_requested_.exchange(true)) return;
  SignalTrainer(SIGTERM);
  absl::MutexLock lock(&mu_);
  killer_ = std::thread([this, grace] {
    if (!exited_.WaitForNotificationWithTimeout(grace)) {
      MT_LOG(WARNING) << assignment_.job_id() << " rank " << assignment_.coordinates().rank()
                      << " still running " << absl::FormatDuration(grace)
                      << " after SIGTERM: SIGKILL";
      SignalTrainer(SIGKILL);
    }
  });
}

RankProcess::~RankProcess() {
  if (!exited()) SignalTrainer(SIGKILL);
  if (waiter_.joinable()) waiter_.join();
  if (reader_.joinable()) reader_.join();
  std::thread killer;
  {
    absl::MutexLock lock(&mu_);
    killer = std::move(killer_);
  }
  if (killer.joinable()) killer.join();
}

}  // namespace mt::worker
