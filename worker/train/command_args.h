// The argument parsing `mt-worker generate` and `mt-worker eval` share: named flags with a
// value (--name VALUE or --name=VALUE; a short -n VALUE), switches without one, positional
// arguments, unknown flags refused by name; typed reads with the flag's range in the error.
// No LibTorch. Thread-compatible values, pure functions.
#ifndef MT_WORKER_TRAIN_COMMAND_ARGS_H_
#define MT_WORKER_TRAIN_COMMAND_ARGS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/generate/inference_model.h"

namespace mt::train {

struct CommandArgs {
  std::map<std::string, std::string> values;  // flag (with its dashes) -> value
  std::set<std::string> switches;             // switches given
  std::vector<std::string> positional;

  bool Has(const std::string& flag) const { return values.count(flag) > 0; }
  std::string Get(const std::string& flag, const std::string& fallback) const;
  // INVALID_ARGUMENT naming the flag when the value is not an integer in [min, max].
  absl::StatusOr<int64_t> Int(const std::string& flag, int64_t fallback, int64_t min,
                              int64_t max) const;
  absl::StatusOr<double> Double(const std::string& flag, double fallback) const;
};

// `value_flags` take a value, `switch_flags` do not. "--help"/"-h" is always a switch.
absl::StatusOr<CommandArgs> ParseCommandArgs(const std::vector<std::string>& args,
                                             const std::set<std::string>& value_flags,
                                             const std::set<std::string>& switch_flags);

// --device, --dtype and --attention (defaults cpu, auto, auto) as the inference model's options.
generate::InferenceModelOptions InferenceOptionsFrom(const CommandArgs& args);

// "-o": text (default) or json; INVALID_ARGUMENT otherwise.
absl::StatusOr<std::string> OutputFormatFrom(const CommandArgs& args);

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_COMMAND_ARGS_H_
