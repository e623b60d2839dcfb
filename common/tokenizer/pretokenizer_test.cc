#include "common/tokenizer/pretokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/random_text_for_test.h"
#include "common/tokenizer/unicode_classes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::tokenizer {
namespace {

using ::testing::ElementsAreArray;

struct SplitCase {
  std::string text;
  std::vector<std::string> pieces;
};

// Expected pieces from Node 20: Array.from(text.matchAll(gpt-3-encoder's pattern)).
const SplitCase kSplitCases[] = {
    {"Hello world", {"Hello", " world"}},
    {"  two", {" ", " two"}},
    {"   three\n", {"  ", " three", "\n"}},
    {"a\n\nb", {"a", "\n", "\n", "b"}},
    {"x \t y", {"x", " \t", " y"}},
    {"'s's'S 'll'lle'x", {"'s", "'s", "'", "S", " '", "ll", "'ll", "e", "'", "x"}},
    {"it's", {"it", "'s"}},
    {"''s", {"''", "s"}},
    {" 'm", {" '", "m"}},
    {"12ab34 56", {"12", "ab", "34", " 56"}},
    {" 1 a ! ", {" 1", " a", " !", " "}},
    {"!!! ?", {"!!!", " ?"}},
    {"a   ", {"a", "   "}},
    {"\n", {"\n"}},
    {" \u00A0x", {" ", "\u00A0", "x"}},
    {"\u2003\u2003y", {"\u2003", "\u2003", "y"}},
    {"\uFEFFz", {"\uFEFF", "z"}},
    {"\u0085q", {"\u0085", "q"}},
    {"x\x1c"
     "y",
     {"x", "\x1c", "y"}},
    {"caf\u00E9 e\u0301x", {"caf\u00E9", " e", "\u0301", "x"}},
    {"\U0001F600\U0001F600 ok", {"\U0001F600\U0001F600", " ok"}},
    {"\u0661\u0662\u0663 \u00BD", {"\u0661\u0662\u0663", " \u00BD"}},
    {"\u2160\u2161", {"\u2160\u2161"}},
    {"tab\tend\t", {"tab", "\t", "end", "\t"}},
    {"a\r\nb", {"a", "\r", "\n", "b"}},
    {"\u3042\u3044 \u4E00\u4E8C", {"\u3042\u3044", " \u4E00\u4E8C"}},
    {"", {}},
    {" ", {" "}},
    {"'", {"'"}},
};

TEST(PreTokenizeTest, MatchesJavaScriptRegex) {
  for (const SplitCase& c : kSplitCases) {
    EXPECT_THAT(PreTokenize(c.text), ElementsAreArray(c.pieces)) << "text: " << c.text;
  }
}

TEST(PreTokenizeTest, InvalidUtf8BytesAreOtherCharacters) {
  // \xFF and a truncated sequence behave like punctuation: they join a run of "other"
  // characters and take a leading space, and never merge with letters.
  EXPECT_THAT(PreTokenize("ab\xFF\xFE!cd"), ElementsAreArray({"ab", "\xFF\xFE!", "cd"}));
  EXPECT_THAT(PreTokenize("a \xE2\x82"), ElementsAreArray({"a", " \xE2\x82"}));
  EXPECT_THAT(PreTokenize("\xC0\xAF x"), ElementsAreArray({"\xC0\xAF", " x"}));
  // An encoded surrogate is three invalid bytes, not a character.
  EXPECT_THAT(PreTokenize("\xED\xA0\x80z"), ElementsAreArray({"\xED\xA0\x80", "z"}));
}

TEST(PreTokenizeTest, PiecesConcatenateToInput) {
  std::mt19937_64 rng(20240601);
  for (int i = 0; i < 3000; ++i) {
    const std::string text =
        i % 2 ? testing::RandomUnicodeText(rng, 1 + i % 40) : testing::RandomBytes(rng, i % 64);
    std::string joined;
    Gpt2PreTokenizer split(text);
    for (absl::string_view piece; split.Next(&piece);) {
      ASSERT_FALSE(piece.empty());
      joined.append(piece.data(), piece.size());
    }
    ASSERT_EQ(joined, text);
  }
}

TEST(DecodeUtf8Test, AcceptsValidAndRejectsInvalid) {
  struct Case {
    std::string bytes;
    uint32_t cp;
    int len;
  };
  const Case cases[] = {
      {"A", 'A', 1},
      {"\xC2\x80", 0x80, 2},
      {"\xDF\xBF", 0x7FF, 2},
      {"\xE0\xA0\x80", 0x800, 3},
      {"\xED\x9F\xBF", 0xD7FF, 3},
      {"\xEE\x80\x80", 0xE000, 3},
      {"\xEF\xBF\xBF", 0xFFFF, 3},
      {"\xF0\x90\x80\x80", 0x10000, 4},
      {"\xF4\x8F\xBF\xBF", 0x10FFFF, 4},
      {"\x80", kInvalidCodePoint, 1},              // lone continuation byte
      {"\xC0\x80", kInvalidCodePoint, 1},          // overlong NUL
      {"\xC1\xBF", kInvalidCodePoint, 1},          // overlong
      {"\xE0\x9F\xBF", kInvalidCodePoint, 1},      // overlong
      {"\xED\xA0\x80", kInvalidCodePoint, 1},      // surrogate
      {"\xF0\x8F\xBF\xBF", kInvalidCodePoint, 1},  // overlong
      {"\xF4\x90\x80\x80", kInvalidCodePoint, 1},  // above U+10FFFF
      {"\xF5\x80\x80\x80", kInvalidCodePoint, 1},
      {"\xFF", kInvalidCodePoint, 1},
      {"\xE2\x82", kInvalidCodePoint, 1},  // truncated
      {"\xC3(", kInvalidCodePoint, 1},     // bad continuation
  };
  for (const Case& c : cases) {
    const auto* p = reinterpret_cast<const unsigned char*>(c.bytes.data());
    int len = 0;
    EXPECT_EQ(DecodeUtf8(p, p + c.bytes.size(), &len), c.cp) << c.bytes;
    EXPECT_EQ(len, c.len) << c.bytes;
  }
}

TEST(DecodeUtf8Test, EncodeDecodeEveryScalarValue) {
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    char buf[4];
    const int n = EncodeUtf8(cp, buf);
    int len = 0;
    const auto* p = reinterpret_cast<const unsigned char*>(buf);
    ASSERT_EQ(DecodeUtf8(p, p + n, &len), cp);
    ASSERT_EQ(len, n);
  }
}

TEST(CharClassTest, SpotChecks) {
  EXPECT_EQ(ClassOfCodePoint('a'), CharClass::kLetter);
  EXPECT_EQ(ClassOfCodePoint(0x00E9), CharClass::kLetter);   // é
  EXPECT_EQ(ClassOfCodePoint(0x4E00), CharClass::kLetter);   // CJK
  EXPECT_EQ(ClassOfCodePoint(0x1D400), CharClass::kLetter);  // mathematical bold A
  EXPECT_EQ(ClassOfCodePoint(0x0301), CharClass::kOther);    // combining acute: Mn, not L
  EXPECT_EQ(ClassOfCodePoint('7'), CharClass::kNumber);
  EXPECT_EQ(ClassOfCodePoint(0x00BD), CharClass::kNumber);  // ½ (No)
  EXPECT_EQ(ClassOfCodePoint(0x2160), CharClass::kNumber);  // Ⅰ (Nl)
  EXPECT_EQ(ClassOfCodePoint(0x1D7CE), CharClass::kNumber);
  EXPECT_EQ(ClassOfCodePoint(0x00A0), CharClass::kSpace);
  EXPECT_EQ(ClassOfCodePoint(0xFEFF), CharClass::kSpace);  // JavaScript's \s has the BOM
  EXPECT_EQ(ClassOfCodePoint(0x0085), CharClass::kOther);  // ... and not NEL
  EXPECT_EQ(ClassOfCodePoint(0x180E), CharClass::kOther);  // no longer a space since 6.3
  EXPECT_EQ(ClassOfCodePoint(0x1F600), CharClass::kOther);
  EXPECT_EQ(ClassOfCodePoint(0xD800), CharClass::kOther);
  EXPECT_EQ(ClassOfCodePoint(kInvalidCodePoint), CharClass::kOther);
}

}  // namespace
}  // namespace mt::tokenizer
