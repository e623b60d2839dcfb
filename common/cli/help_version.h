// --help and --version for the tools that read their own arguments (benchmarks, samples): every
// binary answers both (README). Daemons and CLIs on absl flags get both from ParseFlags
// (daemon.h), which prints the version line below too.
#ifndef MT_COMMON_CLI_HELP_VERSION_H_
#define MT_COMMON_CLI_HELP_VERSION_H_

#include <string>

#include "absl/strings/string_view.h"

namespace mt::cli {

// "NAME 0.1.0 (API mt.v1)": the version line every binary prints.
std::string VersionLine(absl::string_view name);

// When the arguments (argv[1..], up to a "--") hold --help, -help, -h or --version: prints
// `usage` (with a final newline) or VersionLine(name) to stdout and returns true; the caller
// exits 0. False otherwise; argv is left as it is.
bool AnswerHelpOrVersion(int argc, char** argv, absl::string_view name, absl::string_view usage);

}  // namespace mt::cli

#endif  // MT_COMMON_CLI_HELP_VERSION_H_
