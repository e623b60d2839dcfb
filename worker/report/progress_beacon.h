// A rank's progress beacon: what the rank does now (RankActivity) and in which step, sent to
// its daemon over the report pipe by a thread of its own, so that it keeps reporting while
// the training thread is blocked (in a collective) and stops when the whole process is
// (SIGSTOP, a deadlock in the kernel). The coordinator's hang detector
// (coordinator/jobs/hang_detector.h) reads the beacons.
//
// Cheap on the training thread: Set() is two atomic stores, AddComputeSeconds() one short
// lock; no syscalls. The beacon thread wakes every `period` and writes one small frame only
// when Set() was called since the previous frame (changes coalesce: a step of many
// micro-batches in one period gives one frame with the latest activity).
//
// Thread-safe.
#ifndef MT_WORKER_REPORT_PROGRESS_BEACON_H_
#define MT_WORKER_REPORT_PROGRESS_BEACON_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "mt/v1/worker_service.pb.h"
#include "worker/report/report_channel.h"

namespace mt::worker {

class ProgressBeacon {
 public:
  static constexpr absl::Duration kDefaultPeriod = absl::Milliseconds(250);

  // Starts the beacon thread (none when `writer` is disabled).
  explicit ProgressBeacon(ReportWriter writer, absl::Duration period = kDefaultPeriod);
  // Sends what is pending, then stops the thread.
  ~ProgressBeacon();
  ProgressBeacon(const ProgressBeacon&) = delete;
  ProgressBeacon& operator=(const ProgressBeacon&) = delete;

  void Set(mt::v1::RankActivity activity, int64_t step);
  // One finished step's compute time (its time less collectives and data wait), sent with the
  // next frame. Non-finite or negative values are dropped.
  void AddComputeSeconds(double seconds);
  // Writes a frame now if anything changed since the last one (the thread's work).
  void Flush();
  // Frames written so far.
  int64_t frames() const { return frames_.load(std::memory_order_relaxed); }

 private:
  void Loop();

  ReportWriter writer_;
  const absl::Duration period_;
  // (step << 8) | activity, and a counter of Set() calls.
  std::atomic<uint64_t> state_{0};
  std::atomic<uint64_t> changes_{0};
  std::atomic<int64_t> frames_{0};
  absl::Mutex mu_;
  uint64_t sent_changes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<double> compute_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace mt::worker

#endif  // MT_WORKER_REPORT_PROGRESS_BEACON_H_
