// GPT-2's pre-tokenisation: splits text into the pieces that BPE then encodes one by one.
//
// It is the regex  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// written out by hand with JavaScript's semantics (the reference is gpt-3-encoder's /.../gu
// regex): alternatives are tried in order at each position, leftmost first; \s is JavaScript's
// whitespace; classes per unicode_classes.h. A byte that is not valid UTF-8 counts as one
// character of class "other", so every byte string splits into pieces that concatenate back to
// it exactly.
//
//   Gpt2PreTokenizer split(text);
//   for (absl::string_view piece; split.Next(&piece);) { ... }
//
// Thread-compatible; holds a view of the text, which must outlive it.
#ifndef MT_COMMON_TOKENIZER_PRETOKENIZER_H_
#define MT_COMMON_TOKENIZER_PRETOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/tokenizer/unicode_classes.h"

namespace mt::tokenizer {

class Gpt2PreTokenizer {
 public:
  explicit Gpt2PreTokenizer(absl::string_view text)
      : p_(reinterpret_cast<const unsigned char*>(text.data())), end_(p_ + text.size()) {}

  // Sets *piece to the next piece (never empty) and returns true, or returns false at the end.
  bool Next(absl::string_view* piece);

 private:
  // Class and byte length of the character at q (q < end_).
  CharClass ClassAt(const unsigned char* q, int* len) const {
    if (*q < 0x80) {
      *len = 1;
      return static_cast<CharClass>(kAsciiClass[*q]);
    }
    return ClassOfCodePoint(DecodeUtf8(q, end_, len));
  }
  // End of the run of characters of class cls that starts at q.
  const unsigned char* RunEnd(const unsigned char* q, CharClass cls) const;

  static const uint8_t kAsciiClass[128];

  const unsigned char* p_;
  const unsigned char* const end_;
};

// All pieces of text, in order (for tests and tools; Encode uses the iterator).
std::vector<std::string> PreTokenize(absl::string_view text);

}  // namespace mt::tokenizer

#endif  // MT_COMMON_TOKENIZER_PRETOKENIZER_H_
