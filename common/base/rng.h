// Seed mixing and stable hashing, written once (DESIGN.md §3: common/base). These seed every
// RNG of a run (dropout masks, initial weights, data order): a copy that drifted would change a
// run's numbers between the model, the trainer and the parallel layer, so there is only this
// one. Both are the same on every platform and build (std::hash is not). Pure, thread-safe.
#ifndef MT_COMMON_BASE_RNG_H_
#define MT_COMMON_BASE_RNG_H_

#include <cstddef>
#include <cstdint>

namespace mt {

// One step of SplitMix64 (Steele, Lea, Flood 2014) as a mixing function:
// SplitMix64(0) == 0xE220A8397B1DCDAF.
constexpr uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// 64-bit FNV-1a over bytes, continuing from `h` (the offset basis by default):
// Fnv1a("", 0) == 0xCBF29CE484222325, Fnv1a("a", 1) == 0xAF63DC4C8601EC8C.
constexpr uint64_t kFnv1aOffsetBasis = 0xCBF29CE484222325ull;
inline uint64_t Fnv1a(const void* data, size_t size, uint64_t h = kFnv1aOffsetBasis) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) h = (h ^ bytes[i]) * 0x100000001B3ull;
  return h;
}

}  // namespace mt

#endif  // MT_COMMON_BASE_RNG_H_
