// Minimal leveled logging to stderr (results go to stdout; logs never do).
//
//   MT_LOG(INFO) << "worker " << id << " registered";
//   MT_LOG(ERROR) << status;
//
// A line reads "I1129 15:04:05.123456 coordinator.cc:42] message". Thread-safe: each line is
// assembled in its own buffer and written with one call. The minimum level comes from the
// MT_LOG_LEVEL environment variable (DEBUG, INFO, WARNING, ERROR; default INFO), read once.
#ifndef MT_COMMON_BASE_LOGGING_H_
#define MT_COMMON_BASE_LOGGING_H_

#include <sstream>

namespace mt {

enum class LogSeverity { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();  // writes the line; aborts after a kFatal line
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

bool LogEnabled(LogSeverity severity);

}  // namespace mt

#define MT_LOG_SEVERITY_DEBUG ::mt::LogSeverity::kDebug
#define MT_LOG_SEVERITY_INFO ::mt::LogSeverity::kInfo
#define MT_LOG_SEVERITY_WARNING ::mt::LogSeverity::kWarning
#define MT_LOG_SEVERITY_ERROR ::mt::LogSeverity::kError
#define MT_LOG_SEVERITY_FATAL ::mt::LogSeverity::kFatal

#define MT_LOG(level)                                    \
  if (!::mt::LogEnabled(MT_LOG_SEVERITY_##level)) {      \
  } else                                                 \
    ::mt::LogMessage(MT_LOG_SEVERITY_##level, __FILE__, __LINE__).stream()

#define MT_CHECK(cond) \
  if (cond) {          \
  } else               \
    MT_LOG(FATAL) << "check failed: " #cond " "

#endif  // MT_COMMON_BASE_LOGGING_H_
