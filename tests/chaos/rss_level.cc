#include "tests/chaos/rss_level.h"

#include <algorithm>

namespace mt::chaos {

std::optional<double> LevelIn(const std::vector<MemorySample>& samples, absl::Time from,
                              absl::Time to) {
  std::vector<int64_t> in;
  for (const MemorySample& s : samples) {
    if (s.at >= from && s.at < to) in.push_back(s.bytes);
  }
  if (static_cast<int>(in.size()) < kMinLevelSamples) return std::nullopt;
  std::sort(in.begin(), in.end());
  const size_t mid = in.size() / 2;
  if (in.size() % 2 == 1) return static_cast<double>(in[mid]);
  return (static_cast<double>(in[mid - 1]) + static_cast<double>(in[mid])) / 2;
}

std::optional<double> LevelGrowth(const std::vector<MemorySample>& samples, absl::Duration window) {
  if (samples.empty()) return std::nullopt;
  const absl::Time start = samples.front().at;
  const absl::Time end = samples.back().at;
  if (end - window < start + window) return std::nullopt;
  // (end - window, end]: LevelIn's spans are half-open on the right, so shift by a nanosecond.
  const absl::Duration ns = absl::Nanoseconds(1);
  const std::optional<double> before = LevelIn(samples, start, start + window);
  const std::optional<double> after = LevelIn(samples, end - window + ns, end + ns);
  if (!before.has_value() || !after.has_value() || *before <= 0) return std::nullopt;
  return *after / *before - 1;
}

}  // namespace mt::chaos
