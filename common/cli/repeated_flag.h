// Repeatable flags: absl keeps only the last of `--allowed-root A --allowed-root B`; this
// collects every occurrence. Pure; thread-safe.
#ifndef MT_COMMON_CLI_REPEATED_FLAG_H_
#define MT_COMMON_CLI_REPEATED_FLAG_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace mt::cli {

// Every value of flag `name` (absl spelling, '_' not '-') in argv, in order, up to a "--"
// argument: "--name=v", "-name=v", "--name v" and "-name v" all count, and each value is split
// at commas (the absl vector flag's syntax), empty pieces dropped. Call it after ParseFlags
// (which has accepted the flag and normalized its spelling; define it with ABSL_FLAG of type
// std::vector<std::string> so that --help lists it).
std::vector<std::string> RepeatedFlagValues(int argc, char** argv, absl::string_view name);

}  // namespace mt::cli

#endif  // MT_COMMON_CLI_REPEATED_FLAG_H_
