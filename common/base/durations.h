// Elapsed time, written once (DESIGN.md §3: common/base). For timing work in progress
// (phases of a step, a save); schedules and deadlines take an injected Clock (clock.h).
// Thread-safe free functions.
#ifndef MT_COMMON_BASE_DURATIONS_H_
#define MT_COMMON_BASE_DURATIONS_H_

#include <chrono>

namespace mt {

// Seconds from `start` to now on the monotonic clock.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace mt

#endif  // MT_COMMON_BASE_DURATIONS_H_
