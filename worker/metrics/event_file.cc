#include "worker/metrics/event_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "worker/metrics/tfrecord.h"

namespace mt::worker::metrics {
namespace {

std::string HostName() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(const std::string& dir,
                                                                         absl::Time now) {
  if (dir.empty()) return absl::InvalidArgumentError("logging.tensorboard_dir is empty");
  if (absl::Status s = MakeDirectories(dir); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create the TensorBoard directory: ", s.message(), " (logging.tensorboard_dir)"));
  }
  const std::string path = absl::StrCat(dir, "/events.out.tfevents.", absl::ToUnixSeconds(now), ".",
                                        HostName(), ".", ::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(fd, path));
  mt::tensorboard::Event version;
  version.set_wall_time(absl::ToDoubleSeconds(now - absl::UnixEpoch()));
  version.set_file_version("brain.Event:2");
  writer->Add(version);
  if (absl::Status s = writer->Flush(); !s.ok()) return s;
  return writer;
}

EventFileWriter::~EventFileWriter() {
  (void)Flush();
  ::close(fd_);
}

void EventFileWriter::AddScalar(absl::string_view tag, double value, int64_t step,
                                absl::Time wall_time) {
  mt::tensorboard::Event event;
  event.set_wall_time(absl::ToDoubleSeconds(wall_time - absl::UnixEpoch()));
  event.set_step(step);
  mt::tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(std::string(tag));
  v->set_simple_value(static_cast<float>(value));
  Add(event);
}

void EventFileWriter::Add(const mt::tensorboard::Event& event) {
  buffer_ += FrameRecord(event.SerializeAsString());
}

absl::Status EventFileWriter::Flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      buffer_.erase(0, done);
      return absl::DataLossError(absl::StrCat("writing ", path_, ": ", why));
    }
    done += static_cast<size_t>(n);
  }
  buffer_.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<mt::tensorboard::Event>> ReadEventFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path, int64_t{1} << 30);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<std::vector<std::string>> records = ParseRecords(*bytes);
  if (!records.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", records.status().message()));
  }
  std::vector<mt::tensorboard::Event> events(records->size());
  for (size_t i = 0; i < records->size(); ++i) {
    if (!events[i].ParseFromString((*records)[i])) {
      return absl::DataLossError(absl::StrCat(path, ": record ", i, " is not an Event"));
    }
  }
  return events;
}

std::vector<std::string> ListEventFiles(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (absl::StrContains(e->d_name, "tfevents")) out.push_back(dir + "/" + e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace mt::worker::metrics
