#include "client/format.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/time_util.h"

namespace mt::client {

using google::protobuf::util::TimeUtil;

std::string StripPrefix(absl::string_view name, absl::string_view prefix) {
  if (absl::StartsWith(name, prefix)) name.remove_prefix(prefix.size());
  return std::string(name);
}

std::string StateName(mt::v1::JobState state) {
  return StripPrefix(mt::v1::JobState_Name(state), "JOB_STATE_");
}

std::string StateName(mt::v1::WorkerState state) {
  return StripPrefix(mt::v1::WorkerState_Name(state), "WORKER_STATE_");
}

std::string StateName(mt::v1::CheckpointState state) {
  return StripPrefix(mt::v1::CheckpointState_Name(state), "CHECKPOINT_STATE_");
}

std::string LocalTime(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S",
                          absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t)),
                          absl::LocalTimeZone());
}

std::string Eta(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "-";
  return absl::FormatDuration(absl::Trunc(absl::Seconds(seconds), absl::Seconds(1)));
}

std::string EtaOrStall(const mt::v1::Progress& p) {
  if (p.no_progress_seconds() > 0) {
    return absl::StrCat("no progress for ", static_cast<int64_t>(p.no_progress_seconds()), " s");
  }
  return Eta(p.eta_seconds());
}

std::string ClockDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t t = static_cast<int64_t>(std::llround(seconds));
  if (t >= 3600) return absl::StrFormat("%d:%02d:%02d", t / 3600, (t / 60) % 60, t % 60);
  return absl::StrFormat("%d:%02d", t / 60, t % 60);
}

std::string SecondsAgo(const google::protobuf::Timestamp& t, absl::Time now,
                       absl::string_view suffix) {
  if (t.seconds() <= 0) return "-";
  const absl::Duration d = now - absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t));
  return absl::StrFormat("%.1fs%s", absl::ToDoubleSeconds(d), suffix);
}

std::string Number(double v, const char* fmt) {
  if (std::isnan(v)) return "-";
  return absl::StrFormat(fmt, v);
}

std::string FiniteNumber(double v, const char* fmt) { return std::isinf(v) ? "-" : Number(v, fmt); }

std::string Thousands(int64_t v) {
  const std::string digits = absl::StrCat(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string ScaledCount(double v, absl::string_view kilo) {
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.1f%s", v / 1e3, kilo);
  return absl::StrFormat("%.0f", v);
}

std::string TokenRate(double tokens_per_second) {
  return absl::StrCat(ScaledCount(tokens_per_second), " tok/s");
}

std::string BinaryBytes(int64_t n) {
  if (n >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", n / double(int64_t{1} << 30));
  if (n >= (1 << 20)) return absl::StrFormat("%.1f MiB", n / double(1 << 20));
  if (n >= (1 << 10)) return absl::StrFormat("%.1f KiB", n / double(1 << 10));
  return absl::StrCat(n, " B");
}

std::string DecimalBytes(double b) {
  if (b < 1e3) return absl::StrFormat("%.0f B", b);
  if (b < 1e6) return absl::StrFormat("%.1f kB", b / 1e3);
  if (b < 1e9) return absl::StrFormat("%.1f MB", b / 1e6);
  return absl::StrFormat("%.2f GB", b / 1e9);
}

std::string CompactBytes(int64_t bytes) {
  if (bytes <= 0) return "-";
  const double v = static_cast<double>(bytes);
  if (v >= (1ull << 30)) return absl::StrFormat("%.1fG", v / (1ull << 30));
  return absl::StrFormat("%.0fM", v / (1ull << 20));
}

std::string Gib(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
}

std::string Bar(double fraction, int width) {
  const double f = std::clamp(fraction, 0.0, 1.0);
  const int filled = static_cast<int>(f * width);
  return absl::StrCat("[", std::string(filled, '#'), std::string(width - filled, '.'), "]");
}

}  // namespace mt::client
