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
  // Aborts after writing a kFatal line.

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

bool LogEnabled(LogSeverity severity);

// Turns the streamed expression into void so that MT_LOG can sit in a ?: expression, which
// keeps `if (x) MT_LOG(INFO) << y; else ...` unambiguous.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace mt

#define MT_LOG_SEVERITY_DEBUG ::mt::LogSeverity::kDebug
#define MT_LOG_SEVERITY_INFO ::mt::LogSeverity::kInfo
#define MT_LOG_SEVERITY_WARNING ::mt::LogSeverity::kWarning
#define MT_LOG_SEVERITY_ERROR ::mt::LogSeverity::kError
#define MT_LOG_SEVERITY_FATAL ::mt::LogSeverity::kFatal

#define MT_LOG(level)                        \
  !::mt::LogEnabled(MT_LOG_SEVERITY_##level) \
      ? (void)0                              \
      : ::mt::LogVoidify() &                 \
            ::mt::LogMessage(MT_LOG_SEVERITY_##level, __FILE__, __LINE__).stream()

#define MT_CHECK(cond)                                                                  \
  (cond) ? (void)0                                                                      \
         : ::mt::LogVoidify() &                                                         \
               ::mt::LogMessage(::mt::LogSeverity::kFatal, __FILE__, __LINE__).stream() \
                   << "check failed: " #cond " "

#endif  // MT_COMMON_BASE_LOGGING_H_
