// `mtctl data preprocess` flags (preprocess_flags.h): Megatron's preprocess_data.py flags map
// to PreprocessOptions; unsupported ones are rejected by name with the fix, meaningless ones
// become notices.
#include "client/data/preprocess_flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::client::data_cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<std::string> kRequired = {"--input",      "in.jsonl", "--output-prefix", "out",
                                            "--vocab-file", "v.json",   "--merge-file",    "m.txt"};

absl::StatusOr<PreprocessCommand> ParsePreprocess(std::vector<std::string> extra) {
  std::vector<std::string> args = kRequired;
  args.insert(args.end(), extra.begin(), extra.end());
  auto flags = ParseFlags(args, PreprocessFlags(), "preprocess");
  if (!flags.ok()) return flags.status();
  return ParsePreprocess(*flags, /*cpus=*/6);
}

TEST(PreprocessFlagsTest, Defaults) {
  auto c = ParsePreprocess({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.input, "in.jsonl");
  EXPECT_EQ(c->options.output_prefix, "out");
  EXPECT_EQ(c->vocab_file, "v.json");
  EXPECT_EQ(c->merge_file, "m.txt");
  EXPECT_EQ(c->options.workers, 6);
  EXPECT_EQ(c->options.input_format, data::PreprocessInputFormat::kAuto);
  EXPECT_EQ(c->options.on_bad_line, data::BadLinePolicy::kFail);
  EXPECT_FALSE(c->options.append_eod);
  EXPECT_EQ(c->format, OutputFormat::kTable);
  EXPECT_FALSE(c->quiet);
  EXPECT_TRUE(c->notices.empty());
}

TEST(PreprocessFlagsTest, MegatronFlags) {
  auto c = ParsePreprocess({"--json-keys", "text", "title", "--append-eod", "--workers", "3",
                            "--input-format", "txt", "--on-error", "skip", "-o", "yaml", "--quiet",
                            "--tokenizer-type", "GPT2BPETokenizer"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->options.json_keys, ElementsAre("text", "title"));
  EXPECT_TRUE(c->options.append_eod);
  EXPECT_EQ(c->options.workers, 3);
  EXPECT_EQ(c->options.input_format, data::PreprocessInputFormat::kText);
  EXPECT_EQ(c->options.on_bad_line, data::BadLinePolicy::kSkip);
  EXPECT_EQ(c->format, OutputFormat::kYaml);
  EXPECT_TRUE(c->quiet);
}

TEST(PreprocessFlagsTest, IgnoredFlagsBecomeNotices) {
  auto c =
      ParsePreprocess({"--partitions", "4", "--dataset-impl", "mmap", "--chunk-size", "25",
                       "--log-interval", "100", "--keep-newlines", "--keep-sequential-samples",
                       "--lang", "english", "--vocab-size", "50257", "--vocab-extra-ids", "0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->notices,
              ElementsAre(HasSubstr("--partitions 4 ignored"),
                          "--dataset-impl mmap: the only format; nothing to choose",
                          "--chunk-size 25 ignored",
                          "--log-interval 100 ignored (progress is shown on stderr)",
                          "--vocab-size 50257 ignored", HasSubstr("--keep-newlines ignored"),
                          "--keep-sequential-samples ignored: input order is always kept",
                          "--lang ignored: it matters only with --split-sentences"));
  c = ParsePreprocess({"--partitions", "1"});
  EXPECT_TRUE(c->notices.empty());
}

TEST(PreprocessFlagsTest, ErrorsNameTheFlagAndTheFix) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"extra"}, "unexpected argument 'extra' (did you mean --input?)"},
      {{"--split-sentences"}, "--split-sentences is not supported"},
      {{"--tokenizer-model", "x.model"}, "--tokenizer-model is not supported"},
      {{"--tokenizer-type", "HFTokenizer"}, "--tokenizer-type HFTokenizer is not supported"},
      {{"--input-format", "csv"}, "--input-format csv: choose auto, jsonl or text"},
      {{"--on-error", "retry"}, "--on-error retry: choose fail or skip"},
      {{"--workers", "0"}, "--workers 0: expected an integer in [1, 1024]"},
      {{"-o", "xml"}, "-o xml: choose table, json or yaml"},
      {{"--partitions", "0"}, "--partitions 0: expected an integer"},
      {{"--dataset-impl", "lazy"}, "--dataset-impl lazy is not supported: only mmap"},
      {{"--vocab-extra-ids", "100"}, "--vocab-extra-ids is not supported"},
      {{"--chunk-size", "x"}, "--chunk-size x: expected an integer"},
  };
  for (const auto& [extra, message] : cases) {
    auto c = ParsePreprocess(extra);
    ASSERT_FALSE(c.ok()) << extra[0];
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(message));
  }
}

TEST(PreprocessFlagsTest, RequiredFlags) {
  auto parse = [](const std::vector<std::string>& args) {
    return ParsePreprocess(*ParseFlags(args, PreprocessFlags(), "preprocess"), 1).status();
  };
  EXPECT_EQ(parse({}).message(), "--input is required");
  EXPECT_EQ(parse({"--input", "x"}).message(), "--output-prefix is required");
  EXPECT_THAT(std::string(parse({"--input", "x", "--output-prefix", "p"}).message()),
              HasSubstr("--vocab-file and --merge-file are required"));
}

}  // namespace
}  // namespace mt::client::data_cli
