// The pipe between a trainer process and its worker daemon. The daemon creates a pipe, passes
// the write end to the trainer as file descriptor MT_REPORT_FD, and reads RankReport messages
// from the read end to forward them to the coordinator.
//
// Wire format: repeated frames of u32 little-endian length + serialized mt.v1.RankReport;
// a frame is at most kMaxFrameBytes. A trainer started by hand has no MT_REPORT_FD and its
// reports go nowhere.
#ifndef MT_WORKER_REPORT_REPORT_CHANNEL_H_
#define MT_WORKER_REPORT_REPORT_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "mt/v1/worker_service.pb.h"

namespace mt::worker {

inline constexpr uint32_t kMaxFrameBytes = 1 << 20;
inline constexpr char kReportFdEnv[] = "MT_REPORT_FD";

// Writer side (trainer). Thread-safe: copies share one lock, so that frames written from
// several threads (the training thread, the progress beacon's) never interleave.
class ReportWriter {
 public:
  // From MT_REPORT_FD; a writer that drops everything when the variable is unset.
  static ReportWriter FromEnvironment();
  explicit ReportWriter(int fd) : fd_(fd), mu_(std::make_shared<absl::Mutex>()) {}
  bool enabled() const { return fd_ >= 0; }
  // Writes one frame; an error once the daemon has gone (the trainer carries on).
  absl::Status Write(const mt::v1::RankReport& report);

 private:
  int fd_ = -1;
  std::shared_ptr<absl::Mutex> mu_;
};

// Reader side (daemon). Returns the next report, std::nullopt at end of stream, or an error
// for a malformed frame.
absl::StatusOr<std::optional<mt::v1::RankReport>> ReadReport(int fd);

}  // namespace mt::worker

#endif  // MT_WORKER_REPORT_REPORT_CHANNEL_H_
