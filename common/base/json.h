// JSON string quoting, written once (DESIGN.md §3: common/base): every JSON the project writes
// by hand (safetensors headers, HF configs, `-o json`, service discovery) quotes through here.
// Thread-safe free function.
#ifndef MT_COMMON_BASE_JSON_H_
#define MT_COMMON_BASE_JSON_H_

#include <string>

#include "absl/strings/string_view.h"

namespace mt {

// `s` as a JSON string literal, quotes included: '"' and '\' are escaped with a backslash,
// newline, carriage return and tab as \n, \r, \t, the other control characters (< 0x20) as
// \u00XX; every other byte, UTF-8 included, is copied unchanged (the caller passes UTF-8).
//   JsonQuote("a\"b\n\x01") == "\"a\\\"b\\n\\u0001\""
std::string JsonQuote(absl::string_view s);

}  // namespace mt

#endif  // MT_COMMON_BASE_JSON_H_
