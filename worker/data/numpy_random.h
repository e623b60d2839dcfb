// numpy's legacy `numpy.random.RandomState(seed)`, as far as Megatron-LM's GPT dataset uses it:
// the seeded Mersenne Twister and `shuffle` of a 1-D array. Reproducing it bit for bit makes our
// document and shuffle indices identical to Megatron's for the same seed (tests check golden
// values produced by numpy 1.24).
//
//   - Seeding: RandomState(seed) with an integer seed in [0, 2^32) calls mt19937_seed, which is
//     MT19937's init_genrand, i.e. exactly std::mt19937(seed).
//   - shuffle(x) on a 1-D array: for i = n-1 down to 1, j = random_interval(i), swap x[i], x[j].
//   - random_interval(max): the smallest all-ones mask >= max, then draw 32-bit outputs (64-bit
//     when max >= 2^32) & mask until the value is <= max (rejection sampling). For 64-bit draws
//     (arrays over 2^32 elements) numpy's order of the two 32-bit halves is up to its compiler;
//     the high half is taken first here.
//
// Thread-compatible (one object per build).
#ifndef MT_WORKER_DATA_NUMPY_RANDOM_H_
#define MT_WORKER_DATA_NUMPY_RANDOM_H_

#include <cstdint>
#include <random>
#include <utility>

namespace mt::data {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

  uint32_t NextUInt32() { return static_cast<uint32_t>(mt_()); }
  // numpy's mt19937_next64: the first 32-bit output is the high half.
  uint64_t NextUInt64() {
    const uint64_t hi = NextUInt32();
    const uint64_t lo = NextUInt32();
    return (hi << 32) | lo;
  }

  // A uniform integer in [0, max] (numpy's legacy random_interval).
  uint64_t Interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    uint64_t value;
    if (max <= 0xffffffffULL) {
      while ((value = (NextUInt32() & mask)) > max) {
      }
    } else {
      while ((value = (NextUInt64() & mask)) > max) {
      }
    }
    return value;
  }

  // RandomState.shuffle of a 1-D array of n elements.
  template <typename T>
  void Shuffle(T* data, int64_t n) {
    for (int64_t i = n - 1; i >= 1; --i) {
      const uint64_t j = Interval(static_cast<uint64_t>(i));
      std::swap(data[i], data[j]);
    }
  }

 private:
  std::mt19937 mt_;
};

}  // namespace mt::data

#endif  // MT_WORKER_DATA_NUMPY_RANDOM_H_
