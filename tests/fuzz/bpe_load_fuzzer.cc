// Fuzz target: loading a GPT-2 BPE tokenizer from arbitrary file contents. The input is
// "<encoder.json>\n--merges--\n<merges.txt>"; a tokenizer that loads must encode and decode.
#include <cstddef>
#include <cstdint>

#include "common/tokenizer/gpt2_bpe_tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = mt::fuzz::Split(mt::fuzz::AsView(data, size), "\n--merges--\n", 2);
  const absl::string_view vocab = parts[0];
  const absl::string_view merges = parts.size() > 1 ? parts[1] : absl::string_view();
  mt::tokenizer::Gpt2BpeTokenizer::Options options;
  options.cache_entries = 16;
  auto tok = mt::tokenizer::Gpt2BpeTokenizer::CreateFromContents(vocab, merges, options);
  if (!tok.ok()) return 0;
  const std::vector<int32_t> ids = (*tok)->Encode("Hello world, it's 2024!\n\xff\xc3");
  (void)(*tok)->Decode(ids);
  (void)(*tok)->Decode({-1, 0, (*tok)->vocab_size(), (*tok)->eod()});
  return 0;
}
