// Just enough JSON for the tokenizer's files: GPT-2's vocabulary (encoder.json, an object of
// string -> integer) and one string field out of a JSON-lines record ({"text": ...}).
//
// Strings are decoded to UTF-8 with every escape of RFC 8259, surrogate pairs joined; a lone
// surrogate escape becomes U+FFFD, which is what JavaScript's TextEncoder (the reference
// tokenizer's byte source) makes of it. Raw bytes inside strings are passed through unchanged.
// Errors give the byte offset and line of the problem. Thread-safe free functions.
#ifndef MT_COMMON_TOKENIZER_JSON_LITE_H_
#define MT_COMMON_TOKENIZER_JSON_LITE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt::tokenizer {

// Parses a JSON object whose values are all integers, in file order.
absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> ParseJsonStringToIntObject(
    absl::string_view json);

// The string value of the top-level key `key` of the JSON object `json` (the last one if the
// key repeats, as JSON.parse and Python's json do). NotFound when the key is absent;
// InvalidArgument when `json` is not exactly one JSON object or the value is not a string.
absl::StatusOr<std::string> ExtractJsonStringField(absl::string_view json, absl::string_view key);

}  // namespace mt::tokenizer

#endif  // MT_COMMON_TOKENIZER_JSON_LITE_H_
