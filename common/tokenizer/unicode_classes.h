// Character classes of GPT-2's pre-tokenisation pattern, and a strict UTF-8 decoder.
//
// The classes are those of JavaScript's /\p{L}/u, /\p{N}/u and /\s/u, because the reference
// tokenizer (gpt-3-encoder, and js-tiktoken) splits text with a JavaScript regex. The tables
// in unicode_tables.inc are generated from Node (gen_unicode_tables.js records the Unicode
// version); they are not read from the system ICU, whose Unicode version can lag Node's.
//
// Thread-safe: the lookup table is built once, on first use, and never changes.
#ifndef MT_COMMON_TOKENIZER_UNICODE_CLASSES_H_
#define MT_COMMON_TOKENIZER_UNICODE_CLASSES_H_

#include <cstddef>
#include <cstdint>

namespace mt::tokenizer {

enum class CharClass : uint8_t {
  kOther = 0,   // anything else, including bytes that are not valid UTF-8
  kLetter = 1,  // \p{L}
  kNumber = 2,  // \p{N}
  kSpace = 3,   // JavaScript's \s (White_Space minus U+0085, plus U+FEFF)
};

// Returned by DecodeUtf8 for a byte that does not start a valid UTF-8 sequence.
inline constexpr uint32_t kInvalidCodePoint = 0x110000;

// Class of a code point; kOther for kInvalidCodePoint and surrogates.
CharClass ClassOfCodePoint(uint32_t cp);

// Decodes one code point at p (p < end), strictly per Unicode Table 3-7 (no overlongs, no
// surrogates, nothing above U+10FFFF, no truncated sequences). On an invalid sequence it
// returns kInvalidCodePoint and *len = 1, so callers step over bad input one byte at a time.
inline uint32_t DecodeUtf8(const unsigned char* p, const unsigned char* end, int* len) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  const ptrdiff_t avail = end - p;
  auto cont = [](unsigned char b) { return (b & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (avail >= 2 && cont(p[1])) {
      *len = 2;
      return (uint32_t{b0} & 0x1F) << 6 | (p[1] & 0x3F);
    }
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (avail >= 3) {
      const unsigned char lo = b0 == 0xE0 ? 0xA0 : 0x80;
      const unsigned char hi = b0 == 0xED ? 0x9F : 0xBF;
      if (p[1] >= lo && p[1] <= hi && cont(p[2])) {
        *len = 3;
        return (uint32_t{b0} & 0x0F) << 12 | (uint32_t{p[1]} & 0x3F) << 6 | (p[2] & 0x3F);
      }
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (avail >= 4) {
      const unsigned char lo = b0 == 0xF0 ? 0x90 : 0x80;
      const unsigned char hi = b0 == 0xF4 ? 0x8F : 0xBF;
      if (p[1] >= lo && p[1] <= hi && cont(p[2]) && cont(p[3])) {
        *len = 4;
        return (uint32_t{b0} & 0x07) << 18 | (uint32_t{p[1]} & 0x3F) << 12 |
               (uint32_t{p[2]} & 0x3F) << 6 | (p[3] & 0x3F);
      }
    }
  }
  *len = 1;
  return kInvalidCodePoint;
}

// Appends the UTF-8 encoding of a scalar value (cp <= U+10FFFF, not a surrogate) to out;
// returns the number of bytes written (1..4). out must have room for 4 bytes.
int EncodeUtf8(uint32_t cp, char* out);

}  // namespace mt::tokenizer

#endif  // MT_COMMON_TOKENIZER_UNICODE_CLASSES_H_
