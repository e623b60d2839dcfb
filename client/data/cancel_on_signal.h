// SIGINT/SIGTERM/SIGHUP ask a long local run (`mtctl data preprocess`) to stop, so that it can
// remove its temporary files; a second signal kills at once (SA_RESETHAND).
#ifndef MT_CLIENT_DATA_CANCEL_ON_SIGNAL_H_
#define MT_CLIENT_DATA_CANCEL_ON_SIGNAL_H_

#include <signal.h>

#include <array>
#include <atomic>

namespace mt::client::data_cli {

// Installs the handlers for its lifetime and restores the previous ones after. A signal
// handler can only reach process-wide state, so the flag it sets is one per process: make one
// instance at a time (not thread-safe).
class ScopedCancelOnSignal {
 public:
  ScopedCancelOnSignal();
  ~ScopedCancelOnSignal();
  ScopedCancelOnSignal(const ScopedCancelOnSignal&) = delete;
  ScopedCancelOnSignal& operator=(const ScopedCancelOnSignal&) = delete;

  // Set once a signal arrived; for data::PreprocessOptions::cancel.
  static const std::atomic<bool>* cancelled();
  // The last signal that arrived, 0 if none.
  static int signal_number();

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_;
};

}  // namespace mt::client::data_cli

#endif  // MT_CLIENT_DATA_CANCEL_ON_SIGNAL_H_
