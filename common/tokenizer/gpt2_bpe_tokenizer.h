// GPT-2's byte-level BPE tokenizer (Megatron-LM's GPT2BPETokenizer): gpt2-vocab.json
// (= encoder.json) and gpt2-merges.txt (= vocab.bpe).
//
//   MT_ASSIGN_OR_RETURN(auto tok, Gpt2BpeTokenizer::Create(vocab_path, merges_path));
//   std::vector<int32_t> ids = tok->Encode("Hello world");   // {15496, 995}
//   ids.push_back(tok->eod());                                // 50256, <|endoftext|>
//   std::string text = tok->Decode(ids);
//
// Encoding matches the npm package gpt-3-encoder (the reference the tests run) token for token:
// the pre-tokenisation regex with JavaScript's classes (pretokenizer.h), then BPE per piece.
// Text is bytes: valid UTF-8 is split by Unicode classes; a byte that is not valid UTF-8 is
// one "other" character and is encoded as its byte token, so Decode(Encode(s)) == s for every
// byte string s. "<|endoftext|>" inside text is ordinary text, as in GPT-2 and Megatron; the
// caller appends eod() between documents.
//
// Where the JavaScript reference (and so this class) can differ from Python GPT-2 / Megatron:
// - \s is JavaScript's: U+FEFF is whitespace, U+0085 (and U+001C..U+001F) are not, the other
//   way round from Python's regex; \p{L} and \p{N} follow Node's Unicode version (see
//   unicode_tables.inc), not Python's.
// - merge ranks keyed by "first,second" (Options::js_comma_key_quirk). No GPT-2 text we tried
//   is affected: Moby Dick, the State of the Union corpus, and every string of up to 7
//   characters from " \",}{][:." give the same ids either way.
//
// Thread safety: Decode and the accessors are const and thread-safe. Encode is also const and
// thread-safe, but its word cache serves one thread at a time: a call that finds the cache
// busy encodes without it (correct, several times slower). For throughput give each thread its
// own instance; Clone() is cheap (the vocabulary and merge tables are shared, immutable).
#ifndef MT_COMMON_TOKENIZER_GPT2_BPE_TOKENIZER_H_
#define MT_COMMON_TOKENIZER_GPT2_BPE_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace mt::tokenizer {

class Gpt2BpeTokenizer {
 public:
  struct Options {
    // gpt-3-encoder keys its merge ranks by the JavaScript string "first,second", so an
    // adjacent pair (x, y) whose "x,y" equals the key of another merge (a, b) takes that
    // merge's rank (e.g. ("\",", "\"") gets the rank of ("\"", ",\"")). With this on (the
    // default) we reproduce that, token for token; off gives Python GPT-2 / tiktoken / Hugging
    // Face behaviour. The two differ only on some runs of quotes, commas and brackets.
    bool js_comma_key_quirk = true;
    // Words cached per instance; when full the cache is emptied. 0 turns the cache off.
    size_t cache_entries = size_t{1} << 16;
  };

  static absl::StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> Create(
      const std::string& vocab_json_path, const std::string& merges_path);
  static absl::StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> Create(
      const std::string& vocab_json_path, const std::string& merges_path, const Options& options);
  // The same from the files' contents (errors name `vocab_name` / `merges_name`).
  static absl::StatusOr<std::unique_ptr<Gpt2BpeTokenizer>> CreateFromContents(
      absl::string_view vocab_json, absl::string_view merges, const Options& options,
      absl::string_view vocab_name = "vocab", absl::string_view merges_name = "merges");

  Gpt2BpeTokenizer(const Gpt2BpeTokenizer&) = delete;
  Gpt2BpeTokenizer& operator=(const Gpt2BpeTokenizer&) = delete;

  // A tokenizer sharing this one's tables, with its own (empty) cache.
  std::unique_ptr<Gpt2BpeTokenizer> Clone() const;

  std::vector<int32_t> Encode(absl::string_view text) const;
  // Appends the ids of `text` to *out (no allocation per call once *out has grown).
  void EncodeAppend(absl::string_view text, std::vector<int32_t>* out) const;

  // The bytes of the tokens, concatenated (takes a std::vector<int32_t> too). An id outside
  // [0, vocab_size()) decodes to U+FFFD.
  std::string Decode(absl::Span<const int32_t> ids) const;

  // The bytes of one token; empty for an id outside [0, vocab_size()).
  absl::string_view TokenBytes(int32_t id) const;

  int32_t eod() const;         // <|endoftext|>, 50256 for GPT-2
  int32_t vocab_size() const;  // 50257 for GPT-2 (before Megatron pads it)

 private:
  struct Tables;
  // Cached words: word bytes -> [offset, offset + length) of ids in `ids`.
  struct Cache {
    absl::flat_hash_map<std::string, std::pair<uint32_t, uint32_t>> index;
    std::vector<int32_t> ids;
  };

  Gpt2BpeTokenizer(std::shared_ptr<const Tables> tables, const Options& options);

  // BPE of one pre-tokenised piece; appends its ids to *out.
  void EncodeWord(absl::string_view word, std::vector<int32_t>* out) const;
  // EncodeAppend through the word cache.
  void EncodeCached(absl::string_view text, std::vector<int32_t>* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<const Tables> tables_;
  Options options_;
  mutable absl::Mutex mu_;
  mutable Cache cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mt::tokenizer

#endif  // MT_COMMON_TOKENIZER_GPT2_BPE_TOKENIZER_H_
