// Tests of the termination-signal handling every daemon's main uses (daemon.h). Each case runs
// in a forked child, since signal dispositions and masks are per process.
#include "common/cli/daemon.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace mt::cli {
namespace {

// In a child: optionally ignores SIGTERM (as a parent's `trap '' TERM` would leave it), sets up
// the daemon's handling, sends itself `first`, then SIGINT. Exits with the first signal the
// handler saw (0 = none within a second).
int ChildSeesSignal(bool ignore_sigterm, int first) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (ignore_sigterm) signal(SIGTERM, SIG_IGN);
    BlockTerminationSignals();
    std::atomic<int> seen{0};
    OnTerminationSignal([&seen](int sig) { seen = sig; });
    kill(getpid(), first);
    for (int i = 0; i < 50 && seen == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (seen == 0) kill(getpid(), SIGINT);
    for (int i = 0; i < 100 && seen == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    _exit(seen.load());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

TEST(TerminationSignalsTest, SigtermStopsTheDaemon) {
  EXPECT_EQ(ChildSeesSignal(/*ignore_sigterm=*/false, SIGTERM), SIGTERM);
}

TEST(TerminationSignalsTest, SigintStopsTheDaemon) {
  EXPECT_EQ(ChildSeesSignal(/*ignore_sigterm=*/false, SIGINT), SIGINT);
}

TEST(TerminationSignalsTest, InheritedIgnoredSigtermStaysIgnored) {
  // SIGTERM is dropped; the SIGINT sent afterwards is the one the handler sees.
  EXPECT_EQ(ChildSeesSignal(/*ignore_sigterm=*/true, SIGTERM), SIGINT);
}

}  // namespace
}  // namespace mt::cli
