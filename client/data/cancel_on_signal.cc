#include "client/data/cancel_on_signal.h"

#include <cstring>

namespace mt::client::data_cli {
namespace {

// Written by the signal handler, hence lock-free atomics with static storage.
std::atomic<bool> g_cancel{false};
std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  g_signal.store(sig);
  g_cancel.store(true);
}

}  // namespace

ScopedCancelOnSignal::ScopedCancelOnSignal() {
  g_cancel = false;
  g_signal = 0;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
}

ScopedCancelOnSignal::~ScopedCancelOnSignal() {
  for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
}

const std::atomic<bool>* ScopedCancelOnSignal::cancelled() { return &g_cancel; }

int ScopedCancelOnSignal::signal_number() { return g_signal.load(); }

}  // namespace mt::client::data_cli
