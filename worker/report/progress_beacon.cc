#include "worker/report/progress_beacon.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace mt::worker {

ProgressBeacon::ProgressBeacon(ReportWriter writer, absl::Duration period)
    : writer_(std::move(writer)), period_(period) {
  if (writer_.enabled()) thread_ = std::thread([this] { Loop(); });
}

ProgressBeacon::~ProgressBeacon() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
  Flush();
}

void ProgressBeacon::Set(mt::v1::RankActivity activity, int64_t step) {
  const uint64_t packed = (static_cast<uint64_t>(std::max<int64_t>(step, 0)) << 8) |
                          (static_cast<uint64_t>(activity) & 0xff);
  state_.store(packed, std::memory_order_relaxed);
  changes_.fetch_add(1, std::memory_order_release);
}

void ProgressBeacon::AddComputeSeconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return;
  absl::MutexLock lock(&mu_);
  // Bounded: a rank whose beacon cannot write keeps the newest figures only.
  if (compute_.size() >= 4096) compute_.erase(compute_.begin());
  compute_.push_back(seconds);
}

void ProgressBeacon::Flush() {
  if (!writer_.enabled()) return;
  mt::v1::RankReport r;
  {
    absl::MutexLock lock(&mu_);
    const uint64_t changes = changes_.load(std::memory_order_acquire);
    if (changes == sent_changes_) return;
    sent_changes_ = changes;
    const uint64_t packed = state_.load(std::memory_order_relaxed);
    r.set_activity(static_cast<mt::v1::RankActivity>(packed & 0xff));
    r.set_activity_step(static_cast<int64_t>(packed >> 8));
    for (double s : compute_) r.add_step_compute_seconds(s);
    compute_.clear();
  }
  // A daemon that has gone is not the beacon's concern: training carries on.
  if (writer_.Write(r).ok()) frames_.fetch_add(1, std::memory_order_relaxed);
}

void ProgressBeacon::Loop() {
  while (!stop_.WaitForNotificationWithTimeout(period_)) Flush();
}

}  // namespace mt::worker
