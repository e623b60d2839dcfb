#include "common/tokenizer/gpt2_bpe_tokenizer.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "common/tokenizer/random_text_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::tokenizer {
namespace {

using ::mt::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string AssetDir() { return MT_ASSET_DIR; }
std::string VocabPath() { return AssetDir() + "/gpt2-vocab.json"; }
std::string MergesPath() { return AssetDir() + "/gpt2-merges.txt"; }
bool HaveAssets() { return PathExists(VocabPath()) && PathExists(MergesPath()); }

#define MT_SKIP_WITHOUT_ASSETS()                                                        \
  if (!HaveAssets()) {                                                                  \
    GTEST_SKIP() << "GPT-2 BPE files not found in " << AssetDir()                       \
                 << " (gpt2-vocab.json, gpt2-merges.txt); run deploy/setup.sh, or set " \
                    "-DMT_ASSET_DIR";                                                   \
  }

class Gpt2BpeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!HaveAssets()) return;
    auto tok = Gpt2BpeTokenizer::Create(VocabPath(), MergesPath());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(tok).value().release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override { MT_SKIP_WITHOUT_ASSETS(); }
  static const Gpt2BpeTokenizer& tok() { return *tokenizer_; }

  static Gpt2BpeTokenizer* tokenizer_;
};
Gpt2BpeTokenizer* Gpt2BpeTest::tokenizer_ = nullptr;

struct EncodeCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Expected ids from the reference: Node 20, require("gpt-3-encoder@1.1.4/Encoder.js").encode.
const EncodeCase kEncodeCases[] = {
    {"Hello world", {15496, 995}},
    {"Hello, world! How's it going? I'm fine, they'll say we've done it.",
     {15496, 11, 995, 0,    1374, 338, 340,  1016, 30,  314, 1101,
      3734,  11, 484, 1183, 910,  356, 1053, 1760, 340, 13}},
    {"  leading and trailing spaces  ", {220, 3756, 290, 25462, 9029, 220, 220}},
    {"line1\nline2\r\n\tindent\n\n\nend",
     {1370, 16, 198, 1370, 17, 201, 198, 197, 521, 298, 628, 198, 437}},
    {"The year 2024 had 365 days; \u03C0\u22483.14159.",
     {464, 614, 48609, 550, 21268, 1528, 26, 18074, 222, 35705, 230, 18, 13, 1415, 19707, 13}},
    {"\u65E5\u672C\u8A9E\u306E\u30C6\u30AD\u30B9\u30C8\u3001\u4E2D\u6587\uFF0C\uD55C\uAD6D\uC5B4",
     {33768, 98,  17312, 105, 45739, 252, 5641, 24336, 25084, 43302, 23513, 40792, 23877,
      229,   171, 120,   234, 47991, 250, 166,  113,   255,   168,   244,   112}},
    {"emoji \U0001F600\U0001F389 and combining \u00E9 (e\u0301)",
     {368, 31370, 30325, 222, 8582, 236, 231, 290, 19771, 38251, 357, 68, 136, 223, 8}},
    {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}},
    {"don't DON'T 'S 're 've", {9099, 470, 23917, 6, 51, 705, 50, 705, 260, 705, 303}},
    {"\u00A0nbsp\u3000ideographic\uFEFFbom",
     {1849, 77, 24145, 5099, 222, 485, 6826, 171, 119, 123, 65, 296}},
    {"x", {87}},
    {"", {}},
    {"\",\"\",\"", {2430, 2430}},
    {"\u0120", {128, 254}},
    {"   ", {220, 220, 220}},
    {"a  b   c", {64, 220, 275, 220, 220, 269}},
};

TEST_F(Gpt2BpeTest, SizesAndSpecialToken) {
  EXPECT_EQ(tok().vocab_size(), 50257);
  EXPECT_EQ(tok().eod(), 50256);
  EXPECT_EQ(tok().TokenBytes(50256), "<|endoftext|>");
  EXPECT_EQ(tok().TokenBytes(220), " ");
  EXPECT_EQ(tok().TokenBytes(198), "\n");
  EXPECT_EQ(tok().TokenBytes(-1), "");
  EXPECT_EQ(tok().TokenBytes(50257), "");
}

TEST_F(Gpt2BpeTest, ExactIdsFromReference) {
  for (const EncodeCase& c : kEncodeCases) {
    EXPECT_THAT(tok().Encode(c.text), ElementsAreArray(c.ids)) << "text: " << c.text;
    EXPECT_EQ(tok().Decode(c.ids), c.text);
  }
}

TEST_F(Gpt2BpeTest, EncodeAppendAppends) {
  std::vector<int32_t> ids = {7};
  tok().EncodeAppend("Hello world", &ids);
  tok().EncodeAppend(" world", &ids);
  EXPECT_THAT(ids, ElementsAre(7, 15496, 995, 995));
}

TEST_F(Gpt2BpeTest, DecodeReplacesUnknownIds) {
  EXPECT_EQ(tok().Decode({15496, -3, 995, 50257}), "Hello\uFFFD world\uFFFD");
}

TEST_F(Gpt2BpeTest, RoundTripRandomUnicode) {
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 5000; ++i) {
    const std::string text = testing::RandomUnicodeText(rng, 1 + i % 60);
    const std::vector<int32_t> ids = tok().Encode(text);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok().vocab_size());
    ASSERT_EQ(tok().Decode(ids), text);
  }
}

TEST_F(Gpt2BpeTest, RoundTripRandomBytes) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 5000; ++i) {
    const std::string text = testing::RandomBytes(rng, i % 200);
    ASSERT_EQ(tok().Decode(tok().Encode(text)), text);
  }
  // Invalid UTF-8 is encoded byte by byte, never merged with its neighbours' letters.
  EXPECT_THAT(tok().Encode("a\xFF"), ElementsAre(64, 187));
}

TEST_F(Gpt2BpeTest, LongWordsAndLongRuns) {
  for (const std::string& text :
       {std::string(100000, '='), std::string(50000, ' '), std::string(30000, 'a'),
        "x" + std::string(4097, '\n') + "y", std::string(20000, '\xFF')}) {
    EXPECT_EQ(tok().Decode(tok().Encode(text)), text);
  }
}

TEST_F(Gpt2BpeTest, CacheDoesNotChangeResults) {
  Gpt2BpeTokenizer::Options no_cache;
  no_cache.cache_entries = 0;
  MT_ASSERT_OK_AND_ASSIGN(auto uncached,
                          Gpt2BpeTokenizer::Create(VocabPath(), MergesPath(), no_cache));
  Gpt2BpeTokenizer::Options tiny_cache;
  tiny_cache.cache_entries = 3;  // emptied all the time
  MT_ASSERT_OK_AND_ASSIGN(auto tiny,
                          Gpt2BpeTokenizer::Create(VocabPath(), MergesPath(), tiny_cache));
  std::mt19937_64 rng(7);
  for (int i = 0; i < 500; ++i) {
    const std::string text = testing::RandomUnicodeText(rng, 50);
    const std::vector<int32_t> want = tok().Encode(text);
    ASSERT_EQ(uncached->Encode(text), want);
    ASSERT_EQ(tiny->Encode(text), want);
    ASSERT_EQ(tok().Encode(text), want);  // now from the cache
  }
}

TEST_F(Gpt2BpeTest, SharedInstanceAndClonesAcrossThreads) {
  std::mt19937_64 rng(11);
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < 200; ++i) {
    texts.push_back(testing::RandomUnicodeText(rng, 80));
    want.push_back(tok().Encode(texts.back()));
  }
  std::unique_ptr<Gpt2BpeTokenizer> clone = tok().Clone();
  EXPECT_EQ(clone->vocab_size(), tok().vocab_size());
  std::vector<std::thread> threads;
  std::vector<int> failures(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t]() {
      const Gpt2BpeTokenizer& use = t % 2 ? tok() : *clone;  // both shared by 4 threads
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (use.Encode(texts[i]) != want[i]) ++failures[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(failures, ElementsAre(0, 0, 0, 0, 0, 0, 0, 0));
}

TEST_F(Gpt2BpeTest, QuirkOptionAgreesOnOrdinaryText) {
  Gpt2BpeTokenizer::Options python;
  python.js_comma_key_quirk = false;
  MT_ASSERT_OK_AND_ASSIGN(auto py, Gpt2BpeTokenizer::Create(VocabPath(), MergesPath(), python));
  for (const EncodeCase& c : kEncodeCases) EXPECT_EQ(py->Encode(c.text), c.ids) << c.text;
}

// ---- A small synthetic vocabulary: every byte, a few merges, <|endoftext|>. ----

// The character GPT-2 writes for byte b in its files.
std::string ByteChar(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  uint32_t cp = b;
  if (!printable) {
    cp = 256;
    for (int i = 0; i < b; ++i) {
      const bool p = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE);
      if (!p) ++cp;
    }
  }
  std::string out;
  testing::AppendCodePoint(cp, &out);
  return out;
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Vocabulary of the 256 byte characters, then `extra` tokens, then <|endoftext|>.
std::string SmallVocab(const std::vector<std::string>& extra) {
  std::string json = "{";
  int id = 0;
  for (int b = 0; b < 256; ++b)
    absl::StrAppend(&json, "\"", JsonEscape(ByteChar(b)), "\": ", id++, ", ");
  for (const std::string& t : extra)
    absl::StrAppend(&json, "\"", JsonEscape(t), "\": ", id++, ", ");
  absl::StrAppend(&json, "\"<|endoftext|>\": ", id, "}");
  return json;
}

TEST(Gpt2BpeSmallTest, MergesApplyInRankOrder) {
  // "\u0120" is the file form of a space.
  const std::string vocab = SmallVocab({"ab", "abc", "bc", "\u0120a", "\u0120ab"});
  const std::string merges = "#version: 0.2\na b\nab c\nb c\n\u0120 a\n\u0120a b\n";
  MT_ASSERT_OK_AND_ASSIGN(
      auto tok, Gpt2BpeTokenizer::CreateFromContents(vocab, merges, Gpt2BpeTokenizer::Options()));
  EXPECT_EQ(tok->vocab_size(), 262);
  EXPECT_EQ(tok->eod(), 261);
  // Ids: byte b is b, then ab=256 abc=257 bc=258 \u0120a=259 \u0120ab=260.
  EXPECT_THAT(tok->Encode("abc"), ElementsAre(257));        // (a b) first, then (ab c)
  EXPECT_THAT(tok->Encode("bcab"), ElementsAre(258, 256));  // (a b), then (b c)
  // (a b) before (\u0120 a); then (\u0120 ab) is no merge, but (ab c) is.
  EXPECT_THAT(tok->Encode(" abc"), ElementsAre(' ', 257));
  EXPECT_EQ(tok->Decode(tok->Encode(" abc")), " abc");
}

TEST(Gpt2BpeSmallTest, JavaScriptCommaKeyQuirk) {
  // Merges "( ," ", )" "( ,)": gpt-3-encoder keys ranks by "first,second", and "(,,)" is both
  // the key of the merge ("(", ",)") and of the pair ("(,", ")"). After the first merge
  // Python GPT-2 stops at ["(,", ")"]; gpt-3-encoder goes on to "(,)".
  const std::string vocab = SmallVocab({"(,", ",)", "(,)"});
  const std::string merges = "#version: 0.2\n( ,\n, )\n( ,)\n";
  MT_ASSERT_OK_AND_ASSIGN(
      auto js, Gpt2BpeTokenizer::CreateFromContents(vocab, merges, Gpt2BpeTokenizer::Options()));
  Gpt2BpeTokenizer::Options python;
  python.js_comma_key_quirk = false;
  MT_ASSERT_OK_AND_ASSIGN(auto py, Gpt2BpeTokenizer::CreateFromContents(vocab, merges, python));
  EXPECT_THAT(js->Encode("(,)"), ElementsAre(258));
  EXPECT_THAT(py->Encode("(,)"), ElementsAre(256, ')'));
  EXPECT_EQ(js->Decode(js->Encode("(,)")), "(,)");
  EXPECT_EQ(py->Decode(py->Encode("(,)")), "(,)");
}

TEST(Gpt2BpeSmallTest, BadVocabularies) {
  const Gpt2BpeTokenizer::Options o;
  const std::string merges = "#version: 0.2\na b\n";
  struct Case {
    std::string vocab;
    std::string message;
  };
  const Case cases[] = {
      {"[1, 2]", "not a GPT-2 vocabulary"},
      {R"({"a": 0})", "at least 256"},
      {SmallVocab({"ab"}).replace(1, 0, "\"zz\": 999, "), "outside [0, "},
      {SmallVocab({"ab", "\u4E00"}), "outside GPT-2's byte alphabet"},
      {SmallVocab({"ab", "ab"}), "appears twice"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(Gpt2BpeTokenizer::CreateFromContents(c.vocab, merges, o, "v.json", "m.txt"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("v.json"), HasSubstr(c.message))))
        << c.message;
  }
  std::string no_eod = SmallVocab({"ab"});
  no_eod.replace(no_eod.find("<|endoftext|>"), 13, "<|eot|>");
  EXPECT_THAT(Gpt2BpeTokenizer::CreateFromContents(no_eod, merges, o, "v.json", "m.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no <|endoftext|> token")));
  std::string no_byte = SmallVocab({"ab"});
  no_byte.replace(no_byte.find("\"A\": "), 5, "\"AA\": ");
  EXPECT_THAT(Gpt2BpeTokenizer::CreateFromContents(no_byte, merges, o, "v.json", "m.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no token for byte 0x41")));
}

TEST(Gpt2BpeSmallTest, BadMerges) {
  const Gpt2BpeTokenizer::Options o;
  const std::string vocab = SmallVocab({"ab"});
  const std::pair<std::string, std::string> cases[] = {
      {"#version: 0.2\na b c\n", "m.txt:2: expected two tokens"},
      {"#version: 0.2\na\n", "m.txt:2: expected two tokens"},
      {"#version: 0.2\na b\nab zz\n", "m.txt:3: \"zz\" is not in the vocabulary"},
      {"#version: 0.2\nb a\n", "m.txt:2: the merge of \"b\" and \"a\" is not in the vocabulary"},
      {"#version: 0.2\n", "m.txt: no merges"},
  };
  for (const auto& [merges, message] : cases) {
    EXPECT_THAT(Gpt2BpeTokenizer::CreateFromContents(vocab, merges, o, "v.json", "m.txt"),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)))
        << merges;
  }
  // CRLF line ends and a missing trailing newline are fine.
  MT_EXPECT_OK(Gpt2BpeTokenizer::CreateFromContents(vocab, "#version: 0.2\r\na b", o));
}

TEST(Gpt2BpeFilesTest, MissingFilesAreNamed) {
  const std::string dir = testutil::MakeTempDir("tokenizer_test");
  ASSERT_FALSE(dir.empty());
  EXPECT_THAT(
      Gpt2BpeTokenizer::Create(dir + "/nope-vocab.json", dir + "/nope-merges.txt"),
      StatusIs(absl::StatusCode::kNotFound,
               ::testing::AllOf(HasSubstr("nope-vocab.json"), HasSubstr("GPT-2 vocabulary"))));
  const std::string vocab = dir + "/small-vocab.json";
  MT_ASSERT_OK(WriteFileAtomically(vocab, SmallVocab({"ab"})));
  EXPECT_THAT(Gpt2BpeTokenizer::Create(vocab, dir + "/nope-merges.txt"),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::AllOf(HasSubstr("nope-merges.txt"), HasSubstr("merges"))));
  const std::string merges = dir + "/small-merges.txt";
  MT_ASSERT_OK(WriteFileAtomically(merges, "#version: 0.2\na b\n"));
  MT_ASSERT_OK_AND_ASSIGN(auto tok, Gpt2BpeTokenizer::Create(vocab, merges));
  EXPECT_THAT(tok->Encode("ab"), ElementsAre(256));
  const std::string bad = dir + "/bad-vocab.json";
  MT_ASSERT_OK(WriteFileAtomically(bad, "{\"a\": 0,\n\"b\": }"));
  EXPECT_THAT(Gpt2BpeTokenizer::Create(bad, merges),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("bad-vocab.json"), HasSubstr("line 2"))));
  for (const std::string& f : {vocab, merges, bad}) ::unlink(f.c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace mt::tokenizer
