// Fuzz target: the Megatron-LM flags front end (common/spec/megatron_flags). The input is an
// argument vector, one argument per line; the result goes through defaults and the validator.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/spec/defaults.h"
#include "common/spec/megatron_flags.h"
#include "common/spec/validate.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  for (absl::string_view arg : mt::fuzz::Split(mt::fuzz::AsView(data, size), "\n", 4096)) {
    args.emplace_back(arg);
  }
  auto parsed = mt::spec::ParseMegatronFlags(args);
  if (!parsed.ok()) return 0;
  mt::v1::JobSpec spec = parsed->spec;
  mt::spec::ApplyDefaults(&spec);
  (void)mt::spec::ListSpecProblems(spec);
  (void)mt::spec::ResolveForLayout(&spec, 1 + size % 4);
  return 0;
}
