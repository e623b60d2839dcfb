#include "worker/report/report_channel.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/errors.h"
#include "common/base/files.h"

namespace mt::worker {
namespace {

// Reads exactly n bytes; returns bytes read (< n only at end of stream) or -1 on error.
ssize_t ReadFull(int fd, char* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::read(fd, buf + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

ReportWriter ReportWriter::FromEnvironment() {
  const char* v = std::getenv(kReportFdEnv);
  int fd = -1;
  if (v == nullptr || !absl::SimpleAtoi(v, &fd) || fd < 0) return ReportWriter(-1);
  return ReportWriter(fd);
}

absl::Status ReportWriter::Write(const mt::v1::RankReport& report) {
  if (fd_ < 0) return absl::OkStatus();
  std::string body = report.SerializeAsString();
  if (body.size() > kMaxFrameBytes) return absl::InvalidArgumentError("report too large");
  const uint32_t n = static_cast<uint32_t>(body.size());
  std::string frame(4, '\0');
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  frame += body;
  absl::MutexLock lock(mu_.get());
  return WriteAll(fd_, frame, "the report pipe");
}

absl::StatusOr<std::optional<mt::v1::RankReport>> ReadReport(int fd) {
  unsigned char header[4];
  ssize_t r = ReadFull(fd, reinterpret_cast<char*>(header), 4);
  if (r == 0) return std::nullopt;
  if (r != 4) return absl::DataLossError("report pipe: truncated frame header");
  const uint32_t n =
      header[0] | (header[1] << 8) | (header[2] << 16) | (static_cast<uint32_t>(header[3]) << 24);
  if (n > kMaxFrameBytes) {
    return absl::DataLossError(absl::StrCat("report pipe: frame of ", n, " bytes is too large"));
  }
  std::string body(n, '\0');
  if (ReadFull(fd, body.data(), n) != static_cast<ssize_t>(n)) {
    return absl::DataLossError("report pipe: truncated frame");
  }
  mt::v1::RankReport report;
  if (!report.ParseFromString(body)) return absl::DataLossError("report pipe: bad report");
  return report;
}

}  // namespace mt::worker
