// TensorBoard event files: `events.out.tfevents.<unix seconds>.<host>.<pid>` in a directory,
// TFRecord frames (tfrecord.h) of mt.tensorboard.Event (proto/tensorboard/event.proto), the
// first one carrying file_version "brain.Event:2". TensorBoard and tensorboard's own event
// reader read them (tests/gpu/tensorboard_check.py checks that). FORMAT.md has the layout.
#ifndef MT_WORKER_METRICS_EVENT_FILE_H_
#define MT_WORKER_METRICS_EVENT_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tensorboard/event.pb.h"

namespace mt::worker::metrics {

// Appends events to one new file. Writes are buffered until Flush() (or destruction).
// Thread-compatible.
class EventFileWriter {
 public:
  // Creates `dir` (and its parents) if needed and a new event file in it.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(const std::string& dir,
                                                                 absl::Time now);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One scalar event (tag, value) at `step`.
  void AddScalar(absl::string_view tag, double value, int64_t step, absl::Time wall_time);
  void Add(const mt::tensorboard::Event& event);
  // Writes what is buffered to the file.
  absl::Status Flush();
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
  std::string buffer_;
};

// Every event of a file, checking the framing and the CRCs (DataLoss naming the record).
absl::StatusOr<std::vector<mt::tensorboard::Event>> ReadEventFile(const std::string& path);

// The event files in `dir`, sorted by name.
std::vector<std::string> ListEventFiles(const std::string& dir);

}  // namespace mt::worker::metrics

#endif  // MT_WORKER_METRICS_EVENT_FILE_H_
