// Reads a job spec the way users give it: a YAML file, or Megatron-LM flags after
// `--megatron --`. Relative paths are made absolute against the YAML file's folder (or the
// current directory for flags) before anything is sent, since the daemons run elsewhere.
#ifndef MT_CLIENT_SPEC_INPUT_H_
#define MT_CLIENT_SPEC_INPUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/spec/yaml_spec.h"

namespace mt::client {

// args: ["job.yaml"] or ["--megatron", flag, value, ...] (the "--" already removed).
// The spec is returned defaulted and validated; warnings are notices for stderr.
absl::StatusOr<spec::ParsedSpec> ReadSpecArgs(const std::vector<std::string>& args);

}  // namespace mt::client

#endif  // MT_CLIENT_SPEC_INPUT_H_
