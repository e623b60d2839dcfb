// Helpers shared by the libFuzzer targets of tests/fuzz: a scratch directory of the process
// (on /dev/shm when it is writable, removed at exit), files written into it, and a splitter
// of one fuzz input into several parts. Not thread-safe: libFuzzer calls a target from one
// thread.
#ifndef MT_TESTS_FUZZ_FUZZ_UTIL_H_
#define MT_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace mt::fuzz {

// The process's scratch directory (created on first use; removed with its contents at exit).
const std::string& ScratchDir();

// Writes `contents` to `path` (replacing it); aborts on an I/O error, which is the harness's
// fault, never a finding of the code under test.
void WriteBytes(const std::string& path, absl::string_view contents);

// The input cut at each occurrence of `separator` (the separator dropped), at most `max_parts`
// parts (the last one keeps the rest).
std::vector<absl::string_view> Split(absl::string_view input, absl::string_view separator,
                                     size_t max_parts);

inline absl::string_view AsView(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace mt::fuzz

#endif  // MT_TESTS_FUZZ_FUZZ_UTIL_H_
