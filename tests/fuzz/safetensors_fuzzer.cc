// Fuzz target: the safetensors reader (common/checkpoint/safetensors): a whole file in memory,
// its header alone, and every tensor of a file whose index parses.
#include <cstddef>
#include <cstdint>

#include "common/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view file = mt::fuzz::AsView(data, size);
  (void)mt::checkpoint::ParseSafetensorsHeader(file, size);
  auto index = mt::checkpoint::ParseSafetensorsFile(file);
  if (!index.ok()) return 0;
  for (const auto& entry : index->tensors) {
    (void)index->Find(entry.name);
    (void)mt::checkpoint::SafetensorsTensorFromMemory(file, *index, entry);
  }
  return 0;
}
