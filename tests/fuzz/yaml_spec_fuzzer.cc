// Fuzz target: the YAML job-spec front end (common/spec/yaml_spec), then what mtctl and the
// coordinator run on its result: defaults, the validator, the path checks and the YAML writer.
#include <cstddef>
#include <cstdint>

#include "common/spec/defaults.h"
#include "common/spec/validate.h"
#include "common/spec/yaml_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = mt::spec::ParseYamlSpec(mt::fuzz::AsView(data, size));
  if (!parsed.ok()) return 0;
  mt::v1::JobSpec spec = parsed->spec;
  (void)mt::spec::ListSubmittedPathProblems(spec);
  (void)mt::spec::ResolveRelativePaths(&spec, "/base");
  mt::spec::ApplyDefaults(&spec);
  (void)mt::spec::ListSpecProblems(spec);
  (void)mt::spec::ResolveForLayout(&spec, 1 + size % 4);
  (void)mt::spec::SpecToYaml(spec);
  return 0;
}
