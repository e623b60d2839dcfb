// The coordinator's resident memory over one of its runs, judged on levels instead of single
// samples (the soak's invariant 4, soak.h). Measured on a quiet loopback cluster and in the
// soak (README.md, "What made it grow"), the coordinator's anonymous memory swings by about
// 1.5 MiB (5% of it) as jobs, attempts and connections come and go, with no trend: one sample
// against another then measures where in the swing each fell. The level of a span is the
// median of its samples (one a second); growth is the end's level against the baseline's.
#ifndef MT_TESTS_CHAOS_RSS_LEVEL_H_
#define MT_TESTS_CHAOS_RSS_LEVEL_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"

namespace mt::chaos {

struct MemorySample {
  absl::Time at;
  int64_t bytes = 0;
};

// Samples a level needs (fewer: the span says too little).
inline constexpr int kMinLevelSamples = 5;

// The median of the samples taken in [from, to), or nullopt with fewer than kMinLevelSamples.
std::optional<double> LevelIn(const std::vector<MemorySample>& samples, absl::Time from,
                              absl::Time to);

// level(end - window, end] / level[start, start + window) - 1, where start is the first
// sample's time and end the last's; nullopt when the two spans overlap or either lacks samples.
std::optional<double> LevelGrowth(const std::vector<MemorySample>& samples, absl::Duration window);

}  // namespace mt::chaos

#endif  // MT_TESTS_CHAOS_RSS_LEVEL_H_
