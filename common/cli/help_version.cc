#include "common/cli/help_version.h"

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/version.h"

namespace mt::cli {

std::string VersionLine(absl::string_view name) {
  return absl::StrCat(name, " ", kVersion, " (API ", kApiVersion, ")");
}

bool AnswerHelpOrVersion(int argc, char** argv, absl::string_view name, absl::string_view usage) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") return false;
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      std::fputs(std::string(usage).c_str(), stdout);
      if (!absl::EndsWith(usage, "\n")) std::fputc('\n', stdout);
      return true;
    }
    if (arg == "--version") {
      std::puts(VersionLine(name).c_str());
      return true;
    }
  }
  return false;
}

}  // namespace mt::cli
