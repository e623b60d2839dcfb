// How mtctl prints times, durations, sizes, rates, counts and state names, written once and
// used by every verb. Each function's output is part of mtctl's interface (scripts and tests
// read the tables), so tests pin the exact strings (format_test.cc). Thread-safe functions.
#ifndef MT_CLIENT_FORMAT_H_
#define MT_CLIENT_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/timestamp.pb.h"
#include "mt/v1/checkpoint.pb.h"
#include "mt/v1/job.pb.h"

namespace mt::client {

// --- state names: the enum value's name without its type prefix ("RUNNING").
std::string StripPrefix(absl::string_view name, absl::string_view prefix);
std::string StateName(mt::v1::JobState state);
std::string StateName(mt::v1::WorkerState state);
std::string StateName(mt::v1::CheckpointState state);

// --- times and durations.
// "2024-05-01 13:02:03" in the local time zone; "-" for an unset timestamp.
std::string LocalTime(const google::protobuf::Timestamp& t);
// "1h2m3s" (whole seconds); "-" when negative, NaN or infinite.
std::string Eta(double seconds);
// "no progress for 17 s" while the coordinator sees a stalled rank
// (Progress.no_progress_seconds > 0; the ETA is stale then), else Eta(eta_seconds).
std::string EtaOrStall(const mt::v1::Progress& p);
// "m:ss", or "h:mm:ss" from an hour on; "?" when negative or not finite.
std::string ClockDuration(double seconds);
// "2.5s" + suffix: seconds from `t` to `now`; "-" for an unset timestamp.
std::string SecondsAgo(const google::protobuf::Timestamp& t, absl::Time now,
                       absl::string_view suffix = "");

// --- numbers.
// `v` printed with `fmt`; "-" for NaN (a value not measured yet).
std::string Number(double v, const char* fmt = "%.4f");
// As Number, and "-" for infinities too.
std::string FiniteNumber(double v, const char* fmt);
// 1234567 -> "1,234,567".
std::string Thousands(int64_t v);
// "950", "12.3" + kilo, "4.56M": a count or a rate in SI steps.
std::string ScaledCount(double v, absl::string_view kilo = "K");
// "12.3K tok/s".
std::string TokenRate(double tokens_per_second);

// --- sizes.
// Binary units, for files: "512 B", "1.5 KiB", "2.0 MiB", "1.25 GiB".
std::string BinaryBytes(int64_t bytes);
// Decimal units, for data throughput: "512 B", "1.5 kB", "2.0 MB", "1.25 GB".
std::string DecimalBytes(double bytes);
// Compact, for narrow columns: "-" (none), "12M", "1.5G".
std::string CompactBytes(int64_t bytes);
// "15.9 GiB".
std::string Gib(int64_t bytes);

// "[######..................]": `fraction` (clamped to [0, 1]) of `width` cells filled.
std::string Bar(double fraction, int width);

}  // namespace mt::client

#endif  // MT_CLIENT_FORMAT_H_
