// The flag parser of the `mtctl data` verbs. Their flags are those of Megatron-LM's tools
// (preprocess_data.py, merge_datasets.py), which absl flags cannot express: `--flag value` and
// `--flag=value`, hyphens or underscores, and argparse's nargs='+' lists (`--json-keys a b`).
// Errors name the flag and say how to fix it. Thread-safe functions.
#ifndef MT_CLIENT_DATA_FLAGS_H_
#define MT_CLIENT_DATA_FLAGS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/output.h"

namespace mt::client::data_cli {

enum class FlagKind {
  kBool,   // present or not; `--flag=value` is an error
  kValue,  // one value; the last one given wins
  kList,   // every following argument up to the next flag; the last list given wins
};

struct FlagSpec {
  const char* name;  // without dashes; "o" is the short -o (also spelled --output)
  FlagKind kind;
};

// The flags given (by their spec name) and the positional arguments, in order.
struct ParsedFlags {
  std::map<std::string, std::vector<std::string>> values;
  std::vector<std::string> positional;

  bool Has(const std::string& name) const { return values.count(name) > 0; }
  // The flag's (last) value, or `def` when it was not given.
  std::string Get(const std::string& name, const std::string& def = "") const;
  // A list flag's values; empty when it was not given.
  std::vector<std::string> List(const std::string& name) const;
};

// Whether `arg` is spelled as a flag ("--x", "-o", "-o=json"); "--" and "-" are not.
bool IsFlag(absl::string_view arg);

// Parses `args` against `specs`. Everything after "--" is positional. An unknown flag is an
// error that points at `mtctl data <command> --help`.
absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args,
                                       const std::vector<FlagSpec>& specs,
                                       absl::string_view command);

// An integer flag in [min, max], `def` when absent: "--workers 0: expected an integer in
// [1, 1024]".
absl::StatusOr<int64_t> IntFlag(const ParsedFlags& flags, const std::string& name, int64_t def,
                                int64_t min, int64_t max);

// -o table|json|yaml (default table).
absl::StatusOr<OutputFormat> FormatFlag(const ParsedFlags& flags);

// Prints "mtctl: <message>" to stderr and returns the usage exit code (2).
int UsageError(const absl::Status& status);

// A dataset prefix as users give it: a trailing ".bin" or ".idx" is dropped.
std::string StripDatasetSuffix(std::string path);

}  // namespace mt::client::data_cli

#endif  // MT_CLIENT_DATA_FLAGS_H_
