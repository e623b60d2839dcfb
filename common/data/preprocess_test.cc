#include "common/data/preprocess.h"

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/files.h"
#include "common/base/json.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "common/data/indexed_dataset.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"
#include "common/tokenizer/random_text_for_test.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::data {
namespace {

using ::mt::testing::StatusIs;
using ::mt::tokenizer::Gpt2BpeTokenizer;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string AssetDir() { return MT_ASSET_DIR; }
bool HaveAssets() {
  return PathExists(AssetDir() + "/gpt2-vocab.json") && PathExists(AssetDir() + "/gpt2-merges.txt");
}

std::string TextLine(const std::string& text) { return "{\"text\": " + JsonQuote(text) + "}\n"; }

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Every document of a dataset, as token ids (one sequence per document at most).
std::vector<std::vector<int32_t>> ReadDocuments(const std::string& prefix) {
  auto ds = IndexedDataset::Create(prefix);
  EXPECT_TRUE(ds.ok()) << ds.status();
  std::vector<std::vector<int32_t>> docs;
  if (!ds.ok()) return docs;
  for (int64_t d = 0; d < (*ds)->num_documents(); ++d) {
    std::vector<int32_t> doc;
    for (int64_t s = (*ds)->document_index(d); s < (*ds)->document_index(d + 1); ++s) {
      auto t = (*ds)->Get(s);
      EXPECT_TRUE(t.ok()) << t.status();
      doc.insert(doc.end(), t->begin(), t->end());
    }
    docs.push_back(std::move(doc));
  }
  return docs;
}

class PreprocessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!HaveAssets()) return;
    auto tok =
        Gpt2BpeTokenizer::Create(AssetDir() + "/gpt2-vocab.json", AssetDir() + "/gpt2-merges.txt");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(tok).value().release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (!HaveAssets()) {
      GTEST_SKIP() << "GPT-2 BPE files not found in " << AssetDir() << "; run deploy/setup.sh";
    }
    dir_ = testutil::MakeTempDir("preprocess_test");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    if (!dir_.empty()) {
      for (const std::string& n : ListDir(dir_)) ::unlink((dir_ + "/" + n).c_str());
      ::rmdir(dir_.c_str());
    }
  }

  const Gpt2BpeTokenizer& tok() const { return *tokenizer_; }

  std::string WriteInput(const std::string& name, const std::string& contents) {
    const std::string path = dir_ + "/" + name;
    EXPECT_THAT(WriteFileAtomically(path, contents), ::mt::testing::IsOk());
    return path;
  }

  PreprocessOptions Options(const std::string& input, const std::string& out = "out") {
    PreprocessOptions o;
    o.input = input;
    o.output_prefix = dir_ + "/" + out;
    return o;
  }

  std::vector<int32_t> Encode(const std::string& s, bool eod) const {
    std::vector<int32_t> ids = tok().Encode(s);
    if (eod && !ids.empty()) ids.push_back(tok().eod());
    return ids;
  }

  static Gpt2BpeTokenizer* tokenizer_;
  std::string dir_;
};
Gpt2BpeTokenizer* PreprocessTest::tokenizer_ = nullptr;

TEST(PreprocessNamesTest, OutputPrefixIsMegatrons) {
  EXPECT_EQ(PreprocessOutputPrefix("data/corpus", "text"), "data/corpus_text_document");
}

TEST(PreprocessNamesTest, ValidateRejectsBadOptions) {
  PreprocessOptions o;
  EXPECT_THAT(ValidatePreprocessOptions(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--input")));
  o.input = "x";
  EXPECT_THAT(ValidatePreprocessOptions(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--output-prefix")));
  o.output_prefix = "y";
  MT_EXPECT_OK(ValidatePreprocessOptions(o));
  o.json_keys = {"a", "a"};
  EXPECT_THAT(ValidatePreprocessOptions(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"a\" given twice")));
  o.json_keys = {"a", "b"};
  o.input_format = PreprocessInputFormat::kText;
  EXPECT_THAT(ValidatePreprocessOptions(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exactly one key")));
  o.json_keys = {"a"};
  o.workers = 0;
  EXPECT_THAT(ValidatePreprocessOptions(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--workers 0")));
}

TEST(Utf8Test, AcceptsAndRejectsLikePython) {
  struct Case {
    std::string s;
    bool valid;
    size_t offset;
  };
  const Case cases[] = {
      {"", true, 0},
      {"plain ascii, longer than eight bytes", true, 0},
      {"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x90\xB3", true, 0},  // é € 🐳
      {"\xEF\xBF\xBF\xF4\x8F\xBF\xBF", true, 0},               // U+FFFF, U+10FFFF
      {"abc\x80", false, 3},                                   // lone continuation
      {"abcdefghij\xC0\xAF", false, 10},                       // overlong '/'
      {"\xE0\x80\xAF", false, 0},                              // overlong 3-byte
      {"x\xED\xA0\x80", false, 1},                             // surrogate U+D800
      {"\xF4\x90\x80\x80", false, 0},                          // above U+10FFFF
      {"ok \xE2\x82", false, 3},                               // truncated
      {"\xF5\x80\x80\x80", false, 0},
      {"\xFF", false, 0},
  };
  for (const Case& c : cases) {
    size_t offset = 12345;
    EXPECT_EQ(internal::IsValidUtf8(c.s, &offset), c.valid) << absl::CEscape(c.s);
    if (!c.valid) {
      EXPECT_EQ(offset, c.offset) << absl::CEscape(c.s);
    }
  }
}

TEST_F(PreprocessTest, TokensEqualTheTokenizersWithoutEod) {
  const std::vector<std::string> texts = {"Call me Ishmael.", "Some years ago\u2014never mind",
                                          " how long precisely"};
  std::string jsonl;
  for (const auto& t : texts) jsonl += TextLine(t);
  PreprocessOptions o = Options(WriteInput("in.jsonl", jsonl));
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(r.format, PreprocessInputFormat::kJsonl);
  EXPECT_EQ(r.dtype, DType::kUInt16);
  EXPECT_EQ(r.documents, 3);
  EXPECT_EQ(r.lines, 3);
  EXPECT_EQ(r.input_bytes, static_cast<int64_t>(jsonl.size()));
  int64_t expected_tokens = 0;
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) {
    expected.push_back(Encode(t, false));
    expected_tokens += static_cast<int64_t>(expected.back().size());
  }
  EXPECT_EQ(r.tokens, expected_tokens);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].prefix, dir_ + "/out_text_document");
  EXPECT_EQ(r.outputs[0].tokens, expected_tokens);
  EXPECT_EQ(r.outputs[0].documents, 3);
  EXPECT_EQ(ReadDocuments(r.outputs[0].prefix), expected);
  EXPECT_THAT(ListDir(dir_),
              ElementsAre("in.jsonl", "out_text_document.bin", "out_text_document.idx"));
}

TEST_F(PreprocessTest, AppendEodEndsEveryNonEmptyDocument) {
  PreprocessOptions o =
      Options(WriteInput("in.jsonl", TextLine("Hello world") + TextLine("") + TextLine("Bye")));
  o.append_eod = true;
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  // An empty text is an empty document: no sequence and no eod (as in preprocess_data.py).
  EXPECT_THAT(ReadDocuments(r.outputs[0].prefix),
              ElementsAre(ElementsAre(15496, 995, 50256), IsEmpty(),
                          ElementsAreArray(Encode("Bye", true))));
  EXPECT_EQ(r.outputs[0].sequences, 2);
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(r.outputs[0].prefix));
  EXPECT_EQ(ds->num_sequences(), 2);
  EXPECT_EQ(ds->num_documents(), 3);
}

TEST_F(PreprocessTest, SeveralJsonKeysGiveOneOutputEach) {
  std::string jsonl =
      "{\"title\": \"Moby Dick\", \"n\": 1, \"text\": \"Call me Ishmael.\"}\n"
      "{\"text\": \"Loomings\", \"title\": \"\\u00e9t\\u00e9\", \"x\": [1, {}]}\n";
  PreprocessOptions o = Options(WriteInput("in.jsonl", jsonl), "multi");
  o.json_keys = {"text", "title"};
  o.append_eod = true;
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_EQ(r.outputs[0].prefix, dir_ + "/multi_text_document");
  EXPECT_EQ(r.outputs[1].prefix, dir_ + "/multi_title_document");
  EXPECT_THAT(ReadDocuments(r.outputs[0].prefix),
              ElementsAre(ElementsAreArray(Encode("Call me Ishmael.", true)),
                          ElementsAreArray(Encode("Loomings", true))));
  EXPECT_THAT(ReadDocuments(r.outputs[1].prefix),
              ElementsAre(ElementsAreArray(Encode("Moby Dick", true)),
                          ElementsAreArray(Encode("\xC3\xA9t\xC3\xA9", true))));
  EXPECT_EQ(r.tokens, r.outputs[0].tokens + r.outputs[1].tokens);
  EXPECT_EQ(r.documents, 2);
}

struct BadLineCase {
  std::string name;
  std::string line;  // without newline
  std::string reason;
};

class BadLineTest : public PreprocessTest, public ::testing::WithParamInterface<BadLineCase> {};

TEST_P(BadLineTest, FailNamesTheLineAndLeavesNoDataset) {
  const BadLineCase& c = GetParam();
  const std::string input =
      TextLine("one") + "\n" + TextLine("two") + c.line + "\n" + TextLine("five");
  PreprocessOptions o = Options(WriteInput("in.jsonl", input));
  o.workers = 3;
  EXPECT_THAT(Preprocess(o, tok()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("line 4: "), HasSubstr(c.reason))));
  // Nothing but the input: no dataset and no temporary file either.
  EXPECT_THAT(ListDir(dir_), ElementsAre("in.jsonl"));
}

TEST_P(BadLineTest, SkipCountsAndReportsTheLine) {
  const BadLineCase& c = GetParam();
  const std::string input =
      TextLine("one") + "\n" + TextLine("two") + c.line + "\n" + TextLine("five");
  PreprocessOptions o = Options(WriteInput("in.jsonl", input));
  o.on_bad_line = BadLinePolicy::kSkip;
  o.append_eod = true;
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(r.lines, 5);
  EXPECT_EQ(r.blank_lines, 1);
  EXPECT_EQ(r.bad_lines, 1);
  ASSERT_EQ(r.bad_line_examples.size(), 1u);
  EXPECT_EQ(r.bad_line_examples[0].line, 4);
  EXPECT_THAT(r.bad_line_examples[0].reason, HasSubstr(c.reason));
  EXPECT_EQ(r.documents, 3);
  EXPECT_THAT(
      ReadDocuments(r.outputs[0].prefix),
      ElementsAre(ElementsAreArray(Encode("one", true)), ElementsAreArray(Encode("two", true)),
                  ElementsAreArray(Encode("five", true))));
}

INSTANTIATE_TEST_SUITE_P(
    Lines, BadLineTest,
    ::testing::Values(BadLineCase{"NotJson", "this is not json", "not a valid JSON object"},
                      BadLineCase{"Truncated", "{\"text\": \"abc", "unterminated string"},
                      BadLineCase{"TwoObjects", "{\"text\": \"a\"} {}", "trailing characters"},
                      BadLineCase{"Array", "[\"text\"]", "not a valid JSON object"},
                      BadLineCase{"MissingKey", "{\"body\": \"abc\"}", "no field \"text\""},
                      BadLineCase{"NotAString", "{\"text\": 42}", "\"text\" is not a string"},
                      BadLineCase{"Null", "{\"text\": null}", "\"text\" is not a string"},
                      BadLineCase{"NotUtf8", "{\"text\": \"caf\xE9\"}",
                                  "not valid UTF-8 (byte 14 of the line)"}),
    [](const ::testing::TestParamInfo<BadLineCase>& info) { return info.param.name; });

TEST_F(PreprocessTest, SkipWithSeveralKeysDropsTheWholeLine) {
  const std::string input =
      "{\"a\": \"x\", \"b\": \"y\"}\n{\"a\": \"only a\"}\n"
      "{\"a\": \"p\", \"b\": \"q\"}\n";
  PreprocessOptions o = Options(WriteInput("in.jsonl", input));
  o.json_keys = {"a", "b"};
  o.on_bad_line = BadLinePolicy::kSkip;
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(r.bad_lines, 1);
  EXPECT_EQ(r.bad_line_examples[0].line, 2);
  EXPECT_THAT(r.bad_line_examples[0].reason, HasSubstr("no field \"b\""));
  EXPECT_THAT(
      ReadDocuments(r.outputs[0].prefix),
      ElementsAre(ElementsAreArray(Encode("x", false)), ElementsAreArray(Encode("p", false))));
  EXPECT_THAT(
      ReadDocuments(r.outputs[1].prefix),
      ElementsAre(ElementsAreArray(Encode("y", false)), ElementsAreArray(Encode("q", false))));
}

// A corpus of `n` random documents (with quotes, escapes, newlines and non-ASCII text).
std::vector<std::string> RandomDocs(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pieces(0, 60);
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i) {
    docs.push_back(tokenizer::testing::RandomUnicodeText(rng, pieces(rng)));
  }
  return docs;
}

std::string ToJsonl(const std::vector<std::string>& docs) {
  std::string s;
  for (const auto& d : docs) s += TextLine(d);
  return s;
}

TEST_F(PreprocessTest, ManyWorkersKeepOrderAndMatchOneWorkerByteForByte) {
  const std::vector<std::string> docs = RandomDocs(1500, 7);
  const std::string input = WriteInput("in.jsonl", ToJsonl(docs));

  PreprocessOptions one = Options(input, "one");
  one.append_eod = true;
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r1, Preprocess(one, tok()));

  // Tiny batches and a small window, so that batches finish out of order.
  PreprocessOptions many = Options(input, "many");
  many.append_eod = true;
  many.workers = 4;
  many.batch_bytes = 700;
  many.read_bytes = 333;
  many.max_batches_in_flight = 5;
  int progress_calls = 0;
  int64_t last_bytes = 0;
  many.on_progress = [&](const PreprocessProgress& p) {
    ++progress_calls;
    EXPECT_GE(p.bytes_done, last_bytes);
    last_bytes = p.bytes_done;
    EXPECT_EQ(p.total_bytes, static_cast<int64_t>(ToJsonl(docs).size()));
  };
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r4, Preprocess(many, tok()));
  EXPECT_GT(progress_calls, 100);
  EXPECT_EQ(last_bytes, r4.input_bytes);

  EXPECT_EQ(r1.documents, 1500);
  EXPECT_EQ(r4.documents, 1500);
  EXPECT_EQ(r1.tokens, r4.tokens);
  for (const char* ext : {".bin", ".idx"}) {
    MT_ASSERT_OK_AND_ASSIGN(std::string a, ReadFile(r1.outputs[0].prefix + ext));
    MT_ASSERT_OK_AND_ASSIGN(std::string b, ReadFile(r4.outputs[0].prefix + ext));
    EXPECT_TRUE(a == b) << ext << " differs between 1 and 4 workers";
  }
  const std::vector<std::vector<int32_t>> got = ReadDocuments(r4.outputs[0].prefix);
  ASSERT_EQ(got.size(), docs.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    ASSERT_EQ(got[i], Encode(docs[i], true)) << "document " << i;
  }
}

TEST_F(PreprocessTest, FailReportsTheFirstBadLineInInputOrderWhateverTheWorkers) {
  std::vector<std::string> docs = RandomDocs(800, 11);
  std::string input;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i == 700) input += "{\"text\": 1}\n";  // line 701
    if (i == 150) input += "not json\n";       // line 151, reached first
    input += TextLine(docs[i]);
  }
  PreprocessOptions o = Options(WriteInput("in.jsonl", input));
  o.workers = 4;
  o.batch_bytes = 512;
  o.read_bytes = 256;
  for (int run = 0; run < 3; ++run) {
    EXPECT_THAT(Preprocess(o, tok()),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 151: ")));
  }
  o.on_bad_line = BadLinePolicy::kSkip;
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(r.bad_lines, 2);
  ASSERT_EQ(r.bad_line_examples.size(), 2u);
  EXPECT_EQ(r.bad_line_examples[0].line, 151);
  EXPECT_EQ(r.bad_line_examples[1].line, 702);
  EXPECT_EQ(r.documents, 800);
}

TEST_F(PreprocessTest, SkipKeepsOnlyTheFirstFewExamples) {
  std::string input;
  for (int i = 0; i < 30; ++i) input += "nope\n" + TextLine("ok");
  PreprocessOptions o = Options(WriteInput("in.jsonl", "{}\n" + input));
  o.on_bad_line = BadLinePolicy::kSkip;
  o.max_reported_bad_lines = 5;
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(r.bad_lines, 31);
  EXPECT_EQ(r.bad_line_examples.size(), 5u);
  EXPECT_EQ(r.bad_line_examples[1].line, 2);
  EXPECT_EQ(r.documents, 30);
}

TEST_F(PreprocessTest, PlainTextIsOneDocumentPerLine) {
  // CRLF, blank lines and a last line without newline; detected as text ('C' is not '{').
  const std::string input = "\n  \nCall me Ishmael.\r\n\r\n{not json} but text\nlast line";
  PreprocessOptions o = Options(WriteInput("in.txt", input));
  o.append_eod = true;
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(r.format, PreprocessInputFormat::kText);
  EXPECT_EQ(r.lines, 6);
  EXPECT_EQ(r.blank_lines, 3);
  EXPECT_THAT(ReadDocuments(r.outputs[0].prefix),
              ElementsAre(ElementsAreArray(Encode("Call me Ishmael.", true)),
                          ElementsAreArray(Encode("{not json} but text", true)),
                          ElementsAreArray(Encode("last line", true))));
}

TEST_F(PreprocessTest, ExplicitFormatOverridesDetection) {
  const std::string input = "{\"text\": \"a\"}\nplain\n";
  PreprocessOptions o = Options(WriteInput("in.txt", input));
  o.input_format = PreprocessInputFormat::kText;
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(r.format, PreprocessInputFormat::kText);
  EXPECT_THAT(ReadDocuments(r.outputs[0].prefix),
              ElementsAre(ElementsAreArray(Encode("{\"text\": \"a\"}", false)),
                          ElementsAreArray(Encode("plain", false))));
  o.input_format = PreprocessInputFormat::kJsonl;
  EXPECT_THAT(Preprocess(o, tok()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2: not a valid JSON")));
}

TEST_F(PreprocessTest, DetectionSkipsLeadingWhitespaceAndNeedsOneKeyForText) {
  PreprocessOptions o = Options(WriteInput("in.jsonl", "\n \t\n" + TextLine("x")));
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(r.format, PreprocessInputFormat::kJsonl);
  EXPECT_EQ(r.documents, 1);

  o = Options(WriteInput("in.txt", "plain text\n"));
  o.json_keys = {"text", "title"};
  EXPECT_THAT(Preprocess(o, tok()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plain text")));
  EXPECT_THAT(ListDir(dir_),
              ElementsAre("in.jsonl", "in.txt", "out_text_document.bin", "out_text_document.idx"));
}

TEST_F(PreprocessTest, ByteOrderMarkAtTheStartIsIgnored) {
  PreprocessOptions o = Options(WriteInput("in.jsonl", "\xEF\xBB\xBF" + TextLine("x")));
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(r.format, PreprocessInputFormat::kJsonl);
  EXPECT_THAT(ReadDocuments(r.outputs[0].prefix),
              ElementsAre(ElementsAreArray(Encode("x", false))));
  o = Options(WriteInput("in.txt", "\xEF\xBB\xBFplain\n"), "t");
  MT_ASSERT_OK_AND_ASSIGN(r, Preprocess(o, tok()));
  EXPECT_EQ(r.format, PreprocessInputFormat::kText);
  EXPECT_THAT(ReadDocuments(r.outputs[0].prefix),
              ElementsAre(ElementsAreArray(Encode("plain", false))));
}

TEST_F(PreprocessTest, EmptyInputGivesEmptyDatasets) {
  PreprocessOptions o = Options(WriteInput("in.jsonl", ""));
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(r.documents, 0);
  MT_ASSERT_OK_AND_ASSIGN(auto ds, IndexedDataset::Create(r.outputs[0].prefix));
  EXPECT_EQ(ds->num_documents(), 0);
}

TEST_F(PreprocessTest, TooLongLineFailsWithItsNumber) {
  std::string input = TextLine("short") + TextLine(std::string(5000, 'a')) + TextLine("b");
  PreprocessOptions o = Options(WriteInput("in.jsonl", input));
  o.batch_bytes = 64;
  o.read_bytes = 100;
  o.max_line_bytes = 1000;
  EXPECT_THAT(Preprocess(o, tok()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2: longer than 1000")));
  EXPECT_THAT(ListDir(dir_), ElementsAre("in.jsonl"));
  // A long line is fine below the limit, whatever the batch size.
  o.max_line_bytes = 10000;
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(r.documents, 3);
}

TEST_F(PreprocessTest, MissingInputOrOutputDirectoryIsNotFound) {
  PreprocessOptions o = Options(dir_ + "/nope.jsonl");
  EXPECT_THAT(Preprocess(o, tok()), StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope.jsonl")));
  o = Options(WriteInput("in.jsonl", TextLine("x")), "no/such/dir/out");
  EXPECT_THAT(Preprocess(o, tok()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("does not exist")));
  o = Options(dir_);
  EXPECT_THAT(Preprocess(o, tok()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a directory")));
}

TEST_F(PreprocessTest, CancelStopsAndLeavesNothing) {
  const std::string input = WriteInput("in.jsonl", ToJsonl(RandomDocs(2000, 3)));
  std::atomic<bool> cancel{false};
  PreprocessOptions o = Options(input);
  o.workers = 2;
  o.batch_bytes = 1000;
  o.cancel = &cancel;
  int calls = 0;
  o.on_progress = [&](const PreprocessProgress&) {
    if (++calls == 10) cancel = true;
  };
  EXPECT_THAT(Preprocess(o, tok()), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_GE(calls, 10);
  EXPECT_THAT(ListDir(dir_), ElementsAre("in.jsonl"));
}

TEST_F(PreprocessTest, ReplacesAnOlderDataset) {
  PreprocessOptions o = Options(WriteInput("in.jsonl", TextLine("first")));
  MT_ASSERT_OK(Preprocess(o, tok()).status());
  o = Options(WriteInput("in.jsonl", TextLine("second") + TextLine("third")));
  MT_ASSERT_OK_AND_ASSIGN(PreprocessResult r, Preprocess(o, tok()));
  EXPECT_EQ(ReadDocuments(r.outputs[0].prefix).size(), 2u);
}

}  // namespace
}  // namespace mt::data
