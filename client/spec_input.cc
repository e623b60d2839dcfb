#include "client/spec_input.h"

#include <unistd.h>

#include <climits>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status_macros.h"
#include "common/spec/defaults.h"
#include "common/spec/megatron_flags.h"
#include "common/spec/validate.h"

namespace mt::client {
namespace {

std::string CurrentDir() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof(buf)) != nullptr ? std::string(buf) : std::string(".");
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return CurrentDir();
  std::string dir = path.substr(0, slash);
  if (dir.empty()) return "/";
  return dir.front() == '/' ? dir : absl::StrCat(CurrentDir(), "/", dir);
}

}  // namespace

absl::StatusOr<spec::ParsedSpec> ReadSpecArgs(const std::vector<std::string>& args) {
  if (args.empty()) {
    return absl::InvalidArgumentError(
        "give a job file (job.yaml) or Megatron-LM flags after `--megatron --`");
  }
  spec::ParsedSpec parsed;
  std::string base_dir;
  if (args[0] == "--megatron") {
    std::vector<std::string> flags(args.begin() + 1, args.end());
    MT_ASSIGN_OR_RETURN(parsed, spec::ParseMegatronFlags(flags));
    base_dir = CurrentDir();
  } else {
    if (args.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("one job file expected, got ", args.size(), " arguments"));
    }
    auto text = ReadFile(args[0], 1 << 20);
    if (!text.ok()) return Annotate(text.status(), "job file");
    auto yaml = spec::ParseYamlSpec(*text);
    if (!yaml.ok()) return Annotate(yaml.status(), args[0]);
    parsed = *std::move(yaml);
    base_dir = DirOf(args[0]);
  }
  MT_RETURN_IF_ERROR(spec::ResolveRelativePaths(&parsed.spec, base_dir));
  spec::ApplyDefaults(&parsed.spec);
  MT_RETURN_IF_ERROR(spec::ValidateSpec(parsed.spec));
  return parsed;
}

}  // namespace mt::client
