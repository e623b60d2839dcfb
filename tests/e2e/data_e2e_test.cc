// The real `mtctl data` on the real corpora from MT_ASSET_DIR: preprocess Moby Dick, inspect
// it, decode it back to the original chapters; merge; bad input; and interruption (SIGKILL,
// SIGTERM, SIGINT in the middle of a run leave no final .idx).
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/base/paths.h"
#include "common/base/status_matchers.h"
#include "common/tokenizer/gpt2_bpe_tokenizer.h"
#include "common/tokenizer/json_lite.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"
#include "worker/data/gpt_dataset.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using ::mt::testutil::CommandResult;
using ::mt::testutil::RunCommand;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kMtctl = std::string(MT_BINARY_DIR) + "/bin/mtctl";
const std::string kAssets = MT_ASSET_DIR;
const std::string kVocab = kAssets + "/gpt2-vocab.json";
const std::string kMerges = kAssets + "/gpt2-merges.txt";
const std::string kMoby = kAssets + "/moby-dick.jsonl";
const std::string kSotu = kAssets + "/sotu.jsonl";

std::vector<std::string> Lines(const std::string& s) {
  return absl::StrSplit(s, '\n', absl::SkipEmpty());
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

class DataE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& f : {kVocab, kMerges, kMoby, kSotu}) {
      if (!PathExists(f)) GTEST_SKIP() << f << " is missing; run deploy/setup.sh";
    }
    dir_ = testutil::MakeTempDir("data_e2e");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }

  CommandResult Mtctl(std::vector<std::string> args, absl::Duration timeout = absl::Seconds(120)) {
    args.insert(args.begin(), kMtctl);
    auto r = RunCommand(args, timeout);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : CommandResult{};
  }

  std::vector<std::string> Preprocess(const std::string& input, const std::string& prefix) {
    return {"data",
            "preprocess",
            "--input",
            input,
            "--output-prefix",
            prefix,
            "--vocab-file",
            kVocab,
            "--merge-file",
            kMerges,
            "--tokenizer-type",
            "GPT2BPETokenizer"};
  }

  // A large input (the State of the Union corpus, `copies` times), so a run lasts seconds.
  std::string BigInput(int copies) {
    auto sotu = ReadFile(kSotu);
    EXPECT_TRUE(sotu.ok()) << sotu.status();
    const std::string path = dir_ + "/big.jsonl";
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < copies; ++i) out << *sotu;
    return path;
  }

  std::string dir_;
};

TEST_F(DataE2eTest, MobyDickDecodesBackToTheOriginalChapters) {
  const std::string prefix = dir_ + "/moby";
  std::vector<std::string> args = Preprocess(kMoby, prefix);
  for (const char* a : {"--append-eod", "--workers", "2", "-o", "json"}) args.push_back(a);
  CommandResult r = Mtctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"documents\": 139,"));
  EXPECT_THAT(r.out, HasSubstr("\"prefix\": \"" + prefix + "_text_document\""));
  EXPECT_THAT(ListDir(dir_), ElementsAre("moby_text_document.bin", "moby_text_document.idx"));

  // Statistics: every chapter is a document ending with <|endoftext|>.
  const std::string dataset = prefix + "_text_document";
  r = Mtctl({"data", "inspect", dataset, "--vocab-file", kVocab, "--merge-file", kMerges, "-o",
             "json", "--documents", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"documents\": 139,"));
  EXPECT_THAT(r.out, HasSubstr("\"dtype\": \"uint16\""));
  EXPECT_THAT(r.out, HasSubstr("\"documents_ending_with_eod\": 139"));
  EXPECT_THAT(r.out, HasSubstr("\"text\": \"CONTENTS\\n\\n\\nETYMOLOGY."));
  r = Mtctl({"data", "inspect", dataset + ".idx"});  // table; no vocabulary: ids only
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("139 of 139 documents end with 50256"));
  EXPECT_THAT(r.out, HasSubstr("sequence length"));

  // Every document decodes back to its chapter, byte for byte.
  r = Mtctl({"data", "inspect", dataset, "--vocab-file", kVocab, "--merge-file", kMerges,
             "--dump-jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  MT_ASSERT_OK_AND_ASSIGN(std::string original, ReadFile(kMoby));
  const std::vector<std::string> want = Lines(original), got = Lines(r.out);
  ASSERT_EQ(want.size(), 139u);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    MT_ASSERT_OK_AND_ASSIGN(std::string a, tokenizer::ExtractJsonStringField(want[i], "text"));
    MT_ASSERT_OK_AND_ASSIGN(std::string b, tokenizer::ExtractJsonStringField(got[i], "text"));
    ASSERT_EQ(a, b) << "chapter " << i;
  }

  // Sampling (worker/data, as the trainer reads it): Megatron's GPT samples of seq + 1 tokens
  // across document boundaries. Every piece between <|endoftext|> markers is book text.
  std::string book;
  for (const std::string& line : want) {
    MT_ASSERT_OK_AND_ASSIGN(std::string text, tokenizer::ExtractJsonStringField(line, "text"));
    book += text;
  }
  data::GPTDataConfig config;
  config.blend.prefixes = {dataset};
  config.split = "949,50,1";
  config.seq_length = 256;
  config.cache_dir = dir_ + "/cache";
  MT_ASSERT_OK_AND_ASSIGN(data::GPTDatasets sets, data::BuildGPTDatasets(config, {300, 20, 0}));
  ASSERT_NE(sets.train, nullptr);
  ASSERT_NE(sets.valid, nullptr);
  // Whole epochs are indexed (Megatron), so at least the samples asked for.
  EXPECT_GE(sets.train->size(), 300);
  MT_ASSERT_OK_AND_ASSIGN(auto tok, tokenizer::Gpt2BpeTokenizer::Create(kVocab, kMerges));
  int boundaries = 0;
  for (int64_t i = 0; i < 300; ++i) {
    MT_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> sample, sets.train->Sample(i));
    ASSERT_EQ(sample.size(), 257u);
    // Byte-level BPE pieces may split a multi-byte character at a sample's edges; compare
    // whole pieces between the markers, trimmed of their first and last token.
    std::vector<int32_t> piece;
    auto check = [&](bool at_start, bool at_end) {
      std::vector<int32_t> inner(piece.begin() + (at_start ? 1 : 0),
                                 piece.end() - (at_end && !piece.empty() ? 1 : 0));
      if (inner.size() > 2) {
        const std::string text = tok->Decode(inner);
        EXPECT_NE(book.find(text), std::string::npos) << "sample " << i << ": " << text;
      }
      piece.clear();
    };
    bool first = true;
    for (int32_t t : sample) {
      if (t == tok->eod()) {
        ++boundaries;
        check(first, false);
        first = false;
      } else {
        piece.push_back(t);
      }
    }
    check(first, true);
  }
  EXPECT_GT(boundaries, 0);  // some samples span two chapters
}

TEST_F(DataE2eTest, WorkersAndStandardInputGiveTheSameBytes) {
  const std::string one = dir_ + "/one", two = dir_ + "/two", pipe = dir_ + "/pipe";
  std::vector<std::string> a = Preprocess(kSotu, one);
  a.insert(a.end(), {"--append-eod", "--workers", "1", "--quiet"});
  std::vector<std::string> b = Preprocess(kSotu, two);
  b.insert(b.end(), {"--append-eod", "--workers", "2", "--quiet"});
  ASSERT_EQ(Mtctl(a).exit_code, 0);
  ASSERT_EQ(Mtctl(b).exit_code, 0);
  auto r =
      RunCommand({"/bin/sh", "-c",
                  absl::StrCat("exec '", kMtctl, "' data preprocess --input - --output-prefix '",
                               pipe, "' --vocab-file '", kVocab, "' --merge-file '", kMerges,
                               "' --append-eod --workers 2 < '", kSotu, "'")});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->exit_code, 0) << r->err;
  for (const char* ext : {"_text_document.bin", "_text_document.idx"}) {
    MT_ASSERT_OK_AND_ASSIGN(std::string x, ReadFile(one + ext));
    MT_ASSERT_OK_AND_ASSIGN(std::string y, ReadFile(two + ext));
    MT_ASSERT_OK_AND_ASSIGN(std::string z, ReadFile(pipe + ext));
    EXPECT_TRUE(x == y) << ext << ": --workers 1 and 2 differ";
    EXPECT_TRUE(x == z) << ext << ": standard input differs";
  }
}

TEST_F(DataE2eTest, MergeADirectoryOrPrefixes) {
  const std::string parts = dir_ + "/parts";
  fs::create_directory(parts);
  ASSERT_EQ(Mtctl(Preprocess(kMoby, parts + "/a")).exit_code, 0);
  ASSERT_EQ(Mtctl(Preprocess(kSotu, parts + "/b")).exit_code, 0);
  CommandResult r =
      Mtctl({"data", "merge", "--input", parts, "--output-prefix", dir_ + "/all", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"documents\": 372,"));  // 139 + 233
  // Explicit prefixes, in the order given (.idx suffix tolerated), equal to Megatron's sorted
  // directory order here.
  r = Mtctl({"data", "merge", "--input", parts + "/a_text_document.idx", parts + "/b_text_document",
             "--output-prefix", dir_ + "/all2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("372"));
  MT_ASSERT_OK_AND_ASSIGN(std::string x, ReadFile(dir_ + "/all.bin"));
  MT_ASSERT_OK_AND_ASSIGN(std::string y, ReadFile(dir_ + "/all2.bin"));
  EXPECT_TRUE(x == y);
  // A directory holding half a pair is refused, as merge_datasets.py does.
  std::ofstream(parts + "/c.bin") << "x";
  r = Mtctl({"data", "merge", "--input", parts, "--output-prefix", dir_ + "/all3"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("c.bin has no .idx"));
  r = Mtctl({"data", "merge", "--input", dir_ + "/nothing", "--output-prefix", dir_ + "/all4"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
}

TEST_F(DataE2eTest, BadLinesFailWithTheirNumberOrAreSkipped) {
  const std::string input = dir_ + "/in.jsonl";
  std::ofstream(input) << "{\"text\": \"one\"}\n{\"text\": \"two\"}\n{\"txt\": \"three\"}\n"
                       << "{\"text\": \"four\"}\n";
  const std::string prefix = dir_ + "/out";
  CommandResult r = Mtctl(Preprocess(input, prefix));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("line 3: no field \"text\""));
  EXPECT_THAT(r.err, HasSubstr("--on-error skip"));
  EXPECT_FALSE(PathExists(prefix + "_text_document.idx"));
  EXPECT_THAT(ListDir(dir_), ElementsAre("in.jsonl"));

  std::vector<std::string> args = Preprocess(input, prefix);
  args.insert(args.end(), {"--on-error", "skip"});
  r = Mtctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("skipped line 3: no field \"text\""));
  EXPECT_THAT(r.out, HasSubstr("1 bad lines"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("documents +3"));
}

TEST_F(DataE2eTest, PlainTextInputIsDetected) {
  const std::string input = dir_ + "/in.txt";
  std::ofstream(input) << "Call me Ishmael.\nSome years ago.\n";
  std::vector<std::string> args = Preprocess(input, dir_ + "/t");
  args.insert(args.end(), {"--append-eod", "-o", "json"});
  CommandResult r = Mtctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"format\": \"text\""));
  EXPECT_THAT(r.out, HasSubstr("\"documents\": 2,"));
}

TEST_F(DataE2eTest, FlagsFollowMegatronAndErrorsNameTheProblem) {
  CommandResult r = Mtctl({"data", "preprocess", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("--append-eod"));
  EXPECT_EQ(Mtctl({"data", "inspect", "--help"}).exit_code, 0);
  EXPECT_EQ(Mtctl({"data", "merge", "--help"}).exit_code, 0);
  EXPECT_EQ(Mtctl({"data", "--help"}).exit_code, 0);
  EXPECT_EQ(Mtctl({"data", "frobnicate"}).exit_code, 2);

  const std::string prefix = dir_ + "/m";
  std::vector<std::string> base = Preprocess(kMoby, prefix);
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return Mtctl(a);
  };
  r = with({"--bogus-flag", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --bogus-flag"));
  r = with({"--split-sentences"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--split-sentences is not supported"));
  r = with({"--tokenizer-type", "SentencePieceTokenizer"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("SentencePieceTokenizer is not supported"));
  r = with({"--workers", "0"});
  EXPECT_EQ(r.exit_code, 2);
  // Megatron's flags without meaning here: accepted, with a notice; = syntax and several keys.
  r = with({"--dataset-impl=mmap", "--partitions", "2", "--chunk-size", "25", "--log-interval",
            "1000", "--keep-newlines", "--json-keys", "text", "--workers=2", "--append-eod"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--partitions 2 ignored"));
  EXPECT_THAT(r.err, HasSubstr("--keep-newlines ignored"));
  EXPECT_TRUE(PathExists(prefix + "_text_document.idx"));
  r = Mtctl({"data", "preprocess", "--input", dir_ + "/none.jsonl", "--output-prefix", prefix,
             "--vocab-file", kVocab, "--merge-file", kMerges});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("none.jsonl"));
  r = Mtctl({"data", "inspect", dir_ + "/none"});
  EXPECT_EQ(r.exit_code, 3);
}

TEST_F(DataE2eTest, MemoryStaysBoundedOnALargeInput) {
  const std::string input = BigInput(25);  // ~270 MB
  std::vector<std::string> args = Preprocess(input, dir_ + "/big");
  args.insert(args.end(), {"--append-eod", "--workers", "2", "--quiet"});
  CommandResult r = Mtctl(args, absl::Seconds(300));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("5,825 documents"));  // 233 x 25
  // The peak resident set of every child so far (this one is the largest by far): the input
  // streams through bounded buffers instead of being held (~40-50 MB measured, mostly the
  // tokenizer's tables and caches).
  struct rusage ru;
  ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &ru), 0);
  EXPECT_LT(ru.ru_maxrss, 150 * 1024) << "KiB";
}

// Starts a preprocess of `input` in the background and waits until it is writing (its
// temporary .bin exists and is not empty).
void StartAndWaitUntilWriting(testutil::Subprocess* p, const std::vector<std::string>& args,
                              const std::string& dir, const std::string& prefix) {
  ASSERT_THAT(p->Start(args, dir + "/mtctl.log"), testing::IsOk());
  const std::string tmp = absl::StrCat(prefix, "_text_document.bin.tmp.", p->pid());
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        struct stat st;
        return ::stat(tmp.c_str(), &st) == 0 && st.st_size > 0;
      },
      absl::Seconds(60)))
      << tmp << " never appeared";
  ASSERT_TRUE(p->running()) << "finished before it could be interrupted; use a larger input";
}

TEST_F(DataE2eTest, SigkillMidRunLeavesNoFinalIndex) {
  const std::string input = BigInput(25);  // ~270 MB: several seconds with one worker
  const std::string prefix = dir_ + "/big";
  std::vector<std::string> args = Preprocess(input, prefix);
  args.insert(args.begin(), kMtctl);
  args.insert(args.end(), {"--append-eod", "--workers", "1"});
  testutil::Subprocess p;
  StartAndWaitUntilWriting(&p, args, dir_, prefix);
  p.Signal(SIGKILL);
  auto code = p.Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, -SIGKILL);
  EXPECT_FALSE(PathExists(prefix + "_text_document.idx"));
  EXPECT_FALSE(PathExists(prefix + "_text_document.bin"));
  // Only the temporaries of the killed process are left: nothing that looks complete.
  for (const std::string& n : ListDir(dir_)) {
    if (n == "big.jsonl" || n == "mtctl.log") continue;
    EXPECT_THAT(n, HasSubstr(absl::StrCat(".tmp.", p.pid()))) << n;
  }
  CommandResult r = Mtctl({"data", "inspect", prefix + "_text_document"});
  EXPECT_EQ(r.exit_code, 3);
}

TEST_F(DataE2eTest, SigtermAndSigintStopCleanlyAndRemoveTemporaries) {
  const std::string input = BigInput(25);
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string prefix = absl::StrCat(dir_, "/sig", sig);
    std::vector<std::string> args = Preprocess(input, prefix);
    args.insert(args.begin(), kMtctl);
    args.insert(args.end(), {"--append-eod", "--workers", "1"});
    testutil::Subprocess p;
    StartAndWaitUntilWriting(&p, args, dir_, prefix);
    p.Signal(sig);
    auto code = p.Wait(absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 128 + sig);
    EXPECT_THAT(ListDir(dir_), ElementsAre("big.jsonl", "mtctl.log")) << "signal " << sig;
    MT_ASSERT_OK_AND_ASSIGN(std::string log, ReadFile(dir_ + "/mtctl.log"));
    EXPECT_THAT(log, HasSubstr("interrupted"));
  }
}

}  // namespace
}  // namespace mt
