#include "client/data/flags.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/common.h"

namespace mt::client::data_cli {

std::string ParsedFlags::Get(const std::string& name, const std::string& def) const {
  auto it = values.find(name);
  return it == values.end() || it->second.empty() ? def : it->second.back();
}

std::vector<std::string> ParsedFlags::List(const std::string& name) const {
  auto it = values.find(name);
  return it == values.end() ? std::vector<std::string>() : it->second;
}

bool IsFlag(absl::string_view a) {
  return (absl::StartsWith(a, "--") && a.size() > 2) || a == "-o" || absl::StartsWith(a, "-o=");
}

namespace {

// One flag's value(s), taken from its inline "=value" or from the arguments after it; `*i`
// moves past what was consumed.
absl::Status TakeValues(const FlagSpec& spec, const std::string& shown, bool has_inline,
                        const std::string& inline_value, const std::vector<std::string>& args,
                        size_t* i, std::vector<std::string>* values) {
  switch (spec.kind) {
    case FlagKind::kBool:
      if (has_inline) return absl::InvalidArgumentError(absl::StrCat(shown, " takes no value"));
      values->push_back("true");
      return absl::OkStatus();
    case FlagKind::kValue:
      if (has_inline) {
        values->push_back(inline_value);
      } else if (*i + 1 < args.size() && !IsFlag(args[*i + 1])) {
        values->push_back(args[++*i]);
      } else {
        return absl::InvalidArgumentError(absl::StrCat(shown, " needs a value"));
      }
      return absl::OkStatus();
    case FlagKind::kList:
      // Megatron's nargs='+': every following argument up to the next flag.
      values->clear();
      if (has_inline) values->push_back(inline_value);
      while (*i + 1 < args.size() && !IsFlag(args[*i + 1]) && args[*i + 1] != "--") {
        values->push_back(args[++*i]);
      }
      if (values->empty()) return absl::InvalidArgumentError(absl::StrCat(shown, " needs a value"));
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args,
                                       const std::vector<FlagSpec>& specs,
                                       absl::string_view command) {
  ParsedFlags out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      out.positional.insert(out.positional.end(), args.begin() + static_cast<ptrdiff_t>(i) + 1,
                            args.end());
      break;
    }
    if (!IsFlag(a)) {
      out.positional.push_back(a);
      continue;
    }
    std::string name = a[1] == '-' ? a.substr(2) : a.substr(1);
    std::string inline_value;
    const size_t eq = name.find('=');
    const bool has_inline = eq != std::string::npos;
    if (has_inline) {
      inline_value = name.substr(eq + 1);
      name.resize(eq);
    }
    std::replace(name.begin(), name.end(), '_', '-');  // --output_prefix works too
    if (name == "output") name = "o";
    auto spec =
        std::find_if(specs.begin(), specs.end(), [&](const FlagSpec& s) { return name == s.name; });
    if (spec == specs.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a.substr(0, a.find('=')),
                                                     " (see mtctl data ", command, " --help)"));
    }
    const std::string shown = name == "o" ? "-o" : "--" + name;
    absl::Status s =
        TakeValues(*spec, shown, has_inline, inline_value, args, &i, &out.values[name]);
    if (!s.ok()) return s;
  }
  return out;
}

absl::StatusOr<int64_t> IntFlag(const ParsedFlags& f, const std::string& name, int64_t def,
                                int64_t min, int64_t max) {
  if (!f.Has(name)) return def;
  int64_t v;
  const std::string s = f.Get(name);
  if (!absl::SimpleAtoi(s, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " ", s, ": expected an integer in [", min, ", ", max, "]"));
  }
  return v;
}

absl::StatusOr<OutputFormat> FormatFlag(const ParsedFlags& f) {
  return ParseOutputFormat(f.Get("o", "table"));
}

int UsageError(const absl::Status& status) {
  std::fprintf(stderr, "mtctl: %s\n", std::string(status.message()).c_str());
  return kExitUsage;
}

std::string StripDatasetSuffix(std::string p) {
  if (absl::EndsWith(p, ".bin") || absl::EndsWith(p, ".idx")) p.resize(p.size() - 4);
  return p;
}

}  // namespace mt::client::data_cli
