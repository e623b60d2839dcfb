#include "common/base/json.h"

#include "absl/strings/str_cat.h"

namespace mt {

std::string JsonQuote(absl::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n' || c == '\r' || c == '\t') {
      // The short escapes keep multi-line text readable (mtctl prints documents with them).
      out.push_back('\\');
      out.push_back(c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
    } else if (u < 0x20) {
      absl::StrAppend(&out, "\\u", absl::Hex(u, absl::kZeroPad4));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace mt
