#include "common/tokenizer/pretokenizer.h"

namespace mt::tokenizer {

// O = other, L = letter, N = number, S = space (JavaScript's \s: \t \n \v \f \r and ' ').
#define O 0
#define L 1
#define N 2
#define S 3
const uint8_t Gpt2PreTokenizer::kAsciiClass[128] = {
    O, O, O, O, O, O, O, O, O, S, S, S, S, S, O, O,  // 0x00
    O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O,  // 0x10
    S, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O,  // 0x20
    N, N, N, N, N, N, N, N, N, N, O, O, O, O, O, O,  // 0x30
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L,  // 0x40
    L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O,  // 0x50
    O, L, L, L, L, L, L, L, L, L, L, L, L, L, L, L,  // 0x60
    L, L, L, L, L, L, L, L, L, L, L, O, O, O, O, O,  // 0x70
};
#undef O
#undef L
#undef N
#undef S

const unsigned char* Gpt2PreTokenizer::RunEnd(const unsigned char* q, CharClass cls) const {
  while (q < end_) {
    if (*q < 0x80) {
      if (static_cast<CharClass>(kAsciiClass[*q]) != cls) break;
      ++q;
      continue;
    }
    int len;
    if (ClassOfCodePoint(DecodeUtf8(q, end_, &len)) != cls) break;
    q += len;
  }
  return q;
}

bool Gpt2PreTokenizer::Next(absl::string_view* piece) {
  const unsigned char* const start = p_;
  if (start >= end_) return false;
  const unsigned char* stop = nullptr;
  const unsigned char c = *start;
  const ptrdiff_t avail = end_ - start;

  // 's|'t|'re|'ve|'m|'ll|'d (ASCII apostrophe, case-sensitive).
  if (c == '\'' && avail >= 2) {
    const unsigned char c1 = start[1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
      stop = start + 2;
    } else if (avail >= 3 && ((c1 == 'r' && start[2] == 'e') || (c1 == 'v' && start[2] == 'e') ||
                              (c1 == 'l' && start[2] == 'l'))) {
      stop = start + 3;
    }
  }
  if (stop == nullptr) {
    int len;
    const CharClass cls = ClassAt(start, &len);
    if (cls != CharClass::kSpace) {
      //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+  without the optional space.
      stop = RunEnd(start + len, cls);
    } else {
      int len2 = 0;
      CharClass next = CharClass::kSpace;
      if (c == ' ' && avail >= 2) next = ClassAt(start + 1, &len2);
      if (next != CharClass::kSpace) {
        // The same three alternatives with their leading space.
        stop = RunEnd(start + 1 + len2, next);
      } else {
        // \s+(?!\S) | \s+ : a whitespace run up to the end of the text is taken whole; one
        // followed by a non-space gives up its last character (which then prefixes the next
        // piece) unless it is a single character.
        const unsigned char* q = start;
        const unsigned char* last = start;
        while (q < end_) {
          int l;
          if (ClassAt(q, &l) != CharClass::kSpace) break;
          last = q;
          q += l;
        }
        stop = (q == end_ || last == start) ? q : last;
      }
    }
  }
  p_ = stop;
  *piece = absl::string_view(reinterpret_cast<const char*>(start), stop - start);
  return true;
}

std::vector<std::string> PreTokenize(absl::string_view text) {
  std::vector<std::string> out;
  Gpt2PreTokenizer split(text);
  for (absl::string_view piece; split.Next(&piece);) out.emplace_back(piece);
  return out;
}

}  // namespace mt::tokenizer
