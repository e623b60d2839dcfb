// Random text for the tokenizer's property and parity tests: mixes of words, digits, runs of
// (Unicode) whitespace, contractions, punctuation, combining marks, CJK, astral-plane code
// points and any scalar value at all, so that every branch of the splitter gets exercised.
// Deterministic for a given seed. Test-only.
#ifndef MT_COMMON_TOKENIZER_RANDOM_TEXT_FOR_TEST_H_
#define MT_COMMON_TOKENIZER_RANDOM_TEXT_FOR_TEST_H_

#include <cstdint>
#include <random>
#include <string>

#include "common/tokenizer/unicode_classes.h"

namespace mt::tokenizer::testing {

inline void AppendCodePoint(uint32_t cp, std::string* out) {
  char buf[4];
  out->append(buf, EncodeUtf8(cp, buf));
}

// A valid UTF-8 string of about `pieces` random pieces.
inline std::string RandomUnicodeText(std::mt19937_64& rng, int pieces) {
  static const char* const kWords[] = {"the",  "The", "whale",       "Ahab",        "sea",
                                       "a",    "I",   "x",           "don",         "we",
                                       "they", "it",  "caf\xC3\xA9", "na\xC3\xAFve"};
  static const char* const kContractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d",
                                              "'S", "'T", "'RE", "'",   "''", "'x"};
  static const char* const kPunct[] = {"\"",  ",",   ".", "!", "?", "-", "--", ":",
                                       ";",   "(",   ")", "{", "}", "[", "]",  "\",\"",
                                       "\"}", "...", "$", "%", "<", "|", ">",  "<|endoftext|>",
                                       "\\",  "/",   "*", "#", "@", "_"};
  static const uint32_t kSpaces[] = {' ',    '\t',   '\n',   '\r',   0x0B,   0x0C,   0x85,
                                     0xA0,   0x1680, 0x2000, 0x2005, 0x200A, 0x2028, 0x2029,
                                     0x202F, 0x205F, 0x3000, 0xFEFF, 0x1C,   0x1F,   0x180E};
  std::uniform_int_distribution<int> kind(0, 15);
  std::string out;
  for (int i = 0; i < pieces; ++i) {
    switch (kind(rng)) {
      case 0:
      case 1:
        out += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
        break;
      case 2:
        out += ' ';
        out += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
        break;
      case 3:
        out += kContractions[rng() % (sizeof(kContractions) / sizeof(kContractions[0]))];
        break;
      case 4:
        out += kPunct[rng() % (sizeof(kPunct) / sizeof(kPunct[0]))];
        break;
      case 5: {  // runs of digits, ASCII and not
        const int n = 1 + rng() % 6;
        for (int k = 0; k < n; ++k) {
          const uint32_t base = (rng() % 4 == 0) ? 0x0660 : (rng() % 3 == 0 ? 0xFF10 : '0');
          AppendCodePoint(base + rng() % 10, &out);
        }
        break;
      }
      case 6: {  // whitespace runs
        const int n = 1 + rng() % 5;
        for (int k = 0; k < n; ++k) {
          AppendCodePoint(rng() % 2 ? ' ' : kSpaces[rng() % (sizeof(kSpaces) / sizeof(kSpaces[0]))],
                          &out);
        }
        break;
      }
      case 7:  // combining marks (after whatever came before)
        AppendCodePoint(0x0300 + rng() % 0x70, &out);
        break;
      case 8:  // CJK, kana, Hangul
        AppendCodePoint(rng() % 2 ? 0x4E00 + rng() % 0x5000 : 0xAC00 + rng() % 0x2B00, &out);
        break;
      case 9: {  // astral: emoji, mathematical letters and digits, CJK ext B, tags
        static const uint32_t kBases[][2] = {{0x1F300, 0x700}, {0x1D400, 0x400}, {0x20000, 0xA6E0},
                                             {0xE0000, 0x80},  {0x10400, 0x50},  {0x1E900, 0x60}};
        const auto& b = kBases[rng() % 6];
        AppendCodePoint(b[0] + rng() % b[1], &out);
        break;
      }
      case 10: {  // any scalar value, assigned or not
        uint32_t cp;
        do {
          cp = rng() % 0x110000;
        } while (cp >= 0xD800 && cp <= 0xDFFF);
        AppendCodePoint(cp, &out);
        break;
      }
      case 11: {  // any BMP scalar value
        uint32_t cp;
        do {
          cp = rng() % 0x10000;
        } while (cp >= 0xD800 && cp <= 0xDFFF);
        AppendCodePoint(cp, &out);
        break;
      }
      case 12:  // Latin-1 and Latin Extended
        AppendCodePoint(0xA0 + rng() % 0x1E0, &out);
        break;
      case 13:  // control characters
        AppendCodePoint(rng() % 0x20, &out);
        break;
      default:
        out += ' ';
        break;
    }
  }
  return out;
}

// Arbitrary bytes, usually not valid UTF-8.
inline std::string RandomBytes(std::mt19937_64& rng, int n) {
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xFF);
  return out;
}

}  // namespace mt::tokenizer::testing

#endif  // MT_COMMON_TOKENIZER_RANDOM_TEXT_FOR_TEST_H_
