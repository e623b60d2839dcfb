#include "common/tokenizer/unicode_classes.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace mt::tokenizer {
namespace {

struct CodePointRange {
  uint32_t first;
  uint32_t last;
};

#include "common/tokenizer/unicode_tables.inc"

constexpr uint32_t kNumCodePoints = 0x110000;
constexpr int kBlockBits = 8;
constexpr uint32_t kBlockSize = 1u << kBlockBits;

// Two-stage table: stage1[cp >> 8] picks a 256-entry block of classes; identical blocks are
// stored once (about 40 KiB in all instead of 1.1 MiB).
struct ClassTable {
  std::vector<uint16_t> stage1;
  std::vector<CharClass> stage2;

  ClassTable() {
    std::vector<CharClass> flat(kNumCodePoints, CharClass::kOther);
    auto fill = [&flat](const CodePointRange* ranges, size_t n, CharClass cls) {
      for (size_t i = 0; i < n; ++i) {
        for (uint32_t cp = ranges[i].first; cp <= ranges[i].last; ++cp) flat[cp] = cls;
      }
    };
    fill(kLetterRanges, sizeof(kLetterRanges) / sizeof(kLetterRanges[0]), CharClass::kLetter);
    fill(kNumberRanges, sizeof(kNumberRanges) / sizeof(kNumberRanges[0]), CharClass::kNumber);
    fill(kSpaceRanges, sizeof(kSpaceRanges) / sizeof(kSpaceRanges[0]), CharClass::kSpace);
    std::map<std::string, uint16_t> seen;
    stage1.resize(kNumCodePoints / kBlockSize);
    for (uint32_t block = 0; block < kNumCodePoints / kBlockSize; ++block) {
      std::string key(reinterpret_cast<const char*>(&flat[block * kBlockSize]), kBlockSize);
      auto [it, inserted] = seen.emplace(key, static_cast<uint16_t>(seen.size()));
      if (inserted) {
        stage2.insert(stage2.end(), flat.begin() + block * kBlockSize,
                      flat.begin() + (block + 1) * kBlockSize);
      }
      stage1[block] = it->second;
    }
  }
};

const ClassTable& Table() {
  static const ClassTable* const table = new ClassTable();
  return *table;
}

}  // namespace

CharClass ClassOfCodePoint(uint32_t cp) {
  if (cp >= kNumCodePoints) return CharClass::kOther;
  const ClassTable& t = Table();
  return t.stage2[(size_t{t.stage1[cp >> kBlockBits]} << kBlockBits) | (cp & (kBlockSize - 1))];
}

int EncodeUtf8(uint32_t cp, char* out) {
  if (cp < 0x80) {
    out[0] = static_cast<char>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<char>(0xC0 | (cp >> 6));
    out[1] = static_cast<char>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<char>(0xE0 | (cp >> 12));
    out[1] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<char>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<char>(0xF0 | (cp >> 18));
  out[1] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<char>(0x80 | (cp & 0x3F));
  return 4;
}

}  // namespace mt::tokenizer
