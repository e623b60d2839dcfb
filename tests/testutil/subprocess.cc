#include "tests/testutil/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/files.h"

extern char** environ;

namespace mt::testutil {
namespace {

std::vector<char*> CArgs(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Child side: set env, redirect fds, exec. Never returns.
[[noreturn]] void ExecChild(const std::vector<std::string>& argv,
                            const std::vector<std::string>& extra_env, int out_fd, int err_fd) {
  for (const auto& kv : extra_env) ::putenv(const_cast<char*>(kv.c_str()));
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  int devnull = ::open("/dev/null", O_RDONLY);
  ::dup2(devnull, STDIN_FILENO);
  // Unblock signals the test runner may have blocked.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  auto args = CArgs(argv);
  ::execv(args[0], args.data());
  ::dprintf(err_fd, "exec %s: %s\n", args[0], std::strerror(errno));
  ::_exit(127);
}

int DecodeStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1;
}

}  // namespace

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout,
                                         const std::vector<std::string>& extra_env) {
  const std::string dir = MakeTempDir("cmd");
  const std::string out_path = dir + "/out", err_path = dir + "/err";
  int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) ExecChild(argv, extra_env, out_fd, err_fd);
  ::close(out_fd);
  ::close(err_fd);
  const absl::Time end = absl::Now() + timeout;
  int status = 0;
  while (true) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (absl::Now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return absl::DeadlineExceededError(
          absl::StrCat(argv[0], " ran past ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  CommandResult result;
  result.exit_code = DecodeStatus(status);
  result.out = ReadFile(out_path).value_or("");
  result.err = ReadFile(err_path).value_or("");
  ::unlink(out_path.c_str());
  ::unlink(err_path.c_str());
  ::rmdir(dir.c_str());
  return result;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
}

absl::Status Subprocess::Start(const std::vector<std::string>& argv, const std::string& log_path,
                               const std::vector<std::string>& extra_env) {
  int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path));
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) ExecChild(argv, extra_env, fd, fd);
  ::close(fd);
  pid_ = pid;
  exited_ = false;
  return absl::OkStatus();
}

bool Subprocess::running() {
  if (pid_ <= 0 || exited_) return false;
  if (::waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
  return !exited_;
}

void Subprocess::Signal(int sig) {
  if (running()) ::kill(pid_, sig);
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (running()) {
    if (absl::Now() > end) return absl::DeadlineExceededError("process still running");
    absl::SleepFor(absl::Milliseconds(10));
  }
  return DecodeStatus(status_);
}

absl::StatusOr<std::string> WaitForFile(const std::string& path, absl::Duration timeout) {
  std::string content;
  bool ok = WaitFor(
      [&] {
        auto r = ReadFile(path);
        if (!r.ok() || r->empty()) return false;
        content = std::string(absl::StripAsciiWhitespace(*r));
        return true;
      },
      timeout);
  if (!ok) return absl::DeadlineExceededError(absl::StrCat(path, " did not appear"));
  return content;
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      absl::StrCat(base != nullptr && base[0] != '\0' ? base : "/tmp", "/mt_", prefix, "_XXXXXX");
  char* d = ::mkdtemp(tmpl.data());
  return d ? std::string(d) : std::string();
}

}  // namespace mt::testutil
