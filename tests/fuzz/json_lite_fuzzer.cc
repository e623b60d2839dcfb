// Fuzz target: the tokenizer's JSON reader (common/tokenizer/json_lite): the vocabulary object
// and the string field of a JSON-lines record.
#include <cstddef>
#include <cstdint>

#include "common/tokenizer/json_lite.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input = mt::fuzz::AsView(data, size);
  (void)mt::tokenizer::ParseJsonStringToIntObject(input);
  (void)mt::tokenizer::ExtractJsonStringField(input, "text");
  return 0;
}
