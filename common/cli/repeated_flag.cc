#include "common/cli/repeated_flag.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace mt::cli {

std::vector<std::string> RepeatedFlagValues(int argc, char** argv, absl::string_view name) {
  std::vector<std::string> out;
  const auto add = [&out](absl::string_view value) {
    for (absl::string_view piece : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      out.emplace_back(piece);
    }
  };
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") break;
    if (!absl::ConsumePrefix(&a, "--") && !absl::ConsumePrefix(&a, "-")) continue;
    if (a == name && i + 1 < argc) {
      add(argv[++i]);
    } else if (absl::ConsumePrefix(&a, absl::StrCat(name, "="))) {
      add(a);
    }
  }
  return out;
}

}  // namespace mt::cli
