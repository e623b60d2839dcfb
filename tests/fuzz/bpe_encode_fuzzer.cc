// Fuzz target: GPT-2 BPE encoding of arbitrary bytes with the real GPT-2 files (MT_ASSET_DIR,
// fetched by deploy/setup.sh). Checks the tokenizer's contract: every id is in the vocabulary
// and Decode(Encode(s)) == s for every byte string.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "common/tokenizer/gpt2_bpe_tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const mt::tokenizer::Gpt2BpeTokenizer& Tokenizer() {
  static const mt::tokenizer::Gpt2BpeTokenizer* tok = [] {
    auto t = mt::tokenizer::Gpt2BpeTokenizer::Create(MT_ASSET_DIR "/gpt2-vocab.json",
                                                     MT_ASSET_DIR "/gpt2-merges.txt");
    if (!t.ok()) {
      std::fprintf(stderr, "bpe_encode_fuzzer: %s (run deploy/setup.sh for the GPT-2 files)\n",
                   std::string(t.status().message()).c_str());
      std::abort();
    }
    return t->release();
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text = mt::fuzz::AsView(data, size);
  const auto& tok = Tokenizer();
  const std::vector<int32_t> ids = tok.Encode(text);
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) {
      std::fprintf(stderr, "id %d outside the vocabulary\n", id);
      std::abort();
    }
  }
  if (tok.Decode(ids) != text) {
    std::fprintf(stderr, "Decode(Encode(s)) != s\n");
    std::abort();
  }
  return 0;
}
