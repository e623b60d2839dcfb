#include "worker/train/command_args.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mt::train {

std::string CommandArgs::Get(const std::string& flag, const std::string& fallback) const {
  auto it = values.find(flag);
  return it == values.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> CommandArgs::Int(const std::string& flag, int64_t fallback, int64_t min,
                                         int64_t max) const {
  auto it = values.find(flag);
  if (it == values.end()) return fallback;
  int64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " \"", it->second, "\": want an integer in [", min, ", ", max, "]"));
  }
  return v;
}

absl::StatusOr<double> CommandArgs::Double(const std::string& flag, double fallback) const {
  auto it = values.find(flag);
  if (it == values.end()) return fallback;
  double v = 0;
  if (!absl::SimpleAtod(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " \"", it->second, "\": want a number"));
  }
  return v;
}

absl::StatusOr<CommandArgs> ParseCommandArgs(const std::vector<std::string>& args,
                                             const std::set<std::string>& value_flags,
                                             const std::set<std::string>& switch_flags) {
  CommandArgs out;
  bool only_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_positional || a.size() < 2 || a[0] != '-') {
      out.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positional = true;
      continue;
    }
    std::string name = a;
    std::string value;
    const size_t eq = a.find('=');
    const bool inline_value = absl::StartsWith(a, "--") && eq != std::string::npos;
    if (inline_value) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    if (name == "--help" || name == "-h" || switch_flags.count(name) > 0) {
      if (inline_value) return absl::InvalidArgumentError(absl::StrCat(name, " takes no value"));
      out.switches.insert(name == "-h" ? "--help" : name);
    } else if (value_flags.count(name) > 0) {
      if (!inline_value) {
        if (i + 1 >= args.size()) {
          return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
        }
        value = args[++i];
      }
      out.values[name] = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag \"", name, "\""));
    }
  }
  return out;
}

generate::InferenceModelOptions InferenceOptionsFrom(const CommandArgs& args) {
  generate::InferenceModelOptions o;
  o.device = args.Get("--device", "cpu");
  o.dtype = args.Get("--dtype", "auto");
  o.attention = args.Get("--attention", "auto");
  o.quantize = args.Get("--quantize", "none");
  return o;
}

absl::StatusOr<std::string> OutputFormatFrom(const CommandArgs& args) {
  std::string format = args.Get("-o", "text");
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError(absl::StrCat("-o \"", format, "\": want text or json"));
  }
  return format;
}

}  // namespace mt::train
