#include "common/base/logging.h"

#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace mt {
namespace {

LogSeverity MinSeverityFromEnv() {
  const char* v = std::getenv("MT_LOG_LEVEL");
  if (v == nullptr) return LogSeverity::kInfo;
  if (std::strcmp(v, "DEBUG") == 0) return LogSeverity::kDebug;
  if (std::strcmp(v, "WARNING") == 0) return LogSeverity::kWarning;
  if (std::strcmp(v, "ERROR") == 0) return LogSeverity::kError;
  return LogSeverity::kInfo;
}

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

bool LogEnabled(LogSeverity severity) {
  static const LogSeverity min_severity = MinSeverityFromEnv();
  return severity >= min_severity;
}

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) : severity_(severity) {
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E', 'F'};
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm local;
  localtime_r(&tv.tv_sec, &local);
  char prefix[64];
  std::snprintf(prefix, sizeof(prefix), "%c%02d%02d %02d:%02d:%02d.%06ld ",
                kLetters[static_cast<int>(severity)], local.tm_mon + 1, local.tm_mday,
                local.tm_hour, local.tm_min, local.tm_sec, static_cast<long>(tv.tv_usec));
  stream_ << prefix << Basename(file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  // One write per line so that concurrent lines do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace mt
