// Real processes for cross-process tests: start a daemon, run a command and capture its output.
// Not thread-safe; one test thread drives each object.
#ifndef MT_TESTS_TESTUTIL_SUBPROCESS_H_
#define MT_TESTS_TESTUTIL_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mt::testutil {

struct CommandResult {
  int exit_code = -1;  // -signal when killed by a signal
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with argv, waits up to `timeout`, returns its exit code and output.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout = absl::Seconds(60),
                                         const std::vector<std::string>& extra_env = {});

// A background process whose stdout+stderr go to a log file. Killed (SIGKILL) on destruction
// if still running.
class Subprocess {
 public:
  Subprocess() = default;
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  absl::Status Start(const std::vector<std::string>& argv, const std::string& log_path,
                     const std::vector<std::string>& extra_env = {});
  pid_t pid() const { return pid_; }
  bool running();
  void Signal(int sig);
  // Waits for exit; returns the exit code (or -signal), or DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool exited_ = false;
};

// Polls `predicate` every 50 ms until it is true or `timeout` passes.
template <typename Predicate>
bool WaitFor(Predicate predicate, absl::Duration timeout);

// Reads a file that a daemon writes once ready (e.g. --address_file), waiting for it.
absl::StatusOr<std::string> WaitForFile(const std::string& path, absl::Duration timeout);

// A fresh directory under the test's temp dir.
std::string MakeTempDir(const std::string& prefix);

}  // namespace mt::testutil

#include "absl/time/clock.h"

namespace mt::testutil {
template <typename Predicate>
bool WaitFor(Predicate predicate, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (predicate()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return predicate();
}
}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_SUBPROCESS_H_
