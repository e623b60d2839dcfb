// The Megatron-style flag parser of `mtctl data` (flags.h): spellings, lists, and errors that
// name the flag and the fix.
#include "client/data/flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::client::data_cli {
namespace {

using ::testing::ElementsAre;

const std::vector<FlagSpec>& Specs() {
  static const std::vector<FlagSpec> specs = {
      {"quiet", FlagKind::kBool},     {"output-prefix", FlagKind::kValue},
      {"json-keys", FlagKind::kList}, {"o", FlagKind::kValue},
      {"workers", FlagKind::kValue},
  };
  return specs;
}

absl::StatusOr<ParsedFlags> Parse(const std::vector<std::string>& args) {
  return ParseFlags(args, Specs(), "preprocess");
}

TEST(DataFlagsTest, SpellingsOfOneFlag) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--output-prefix", "p"},
                                             {"--output-prefix=p"},
                                             {"--output_prefix", "p"},
                                             {"--output_prefix=p"}}) {
    auto f = Parse(args);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->Get("output-prefix"), "p");
  }
}

TEST(DataFlagsTest, OutputFormatSpellings) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"-o", "json"}, {"-o=json"}, {"--output", "json"}, {"--o", "json"}}) {
    auto f = Parse(args);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(*FormatFlag(*f), OutputFormat::kJson);
  }
  auto f = Parse({});
  EXPECT_EQ(*FormatFlag(*f), OutputFormat::kTable);
  f = Parse({"-o", "xml"});
  EXPECT_EQ(FormatFlag(*f).status().message(), "-o xml: choose table, json or yaml");
}

TEST(DataFlagsTest, ListsTakeEverythingUpToTheNextFlag) {
  auto f = Parse({"--json-keys", "text", "title", "--quiet", "rest", "--", "--not-a-flag"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_THAT(f->List("json-keys"), ElementsAre("text", "title"));
  EXPECT_TRUE(f->Has("quiet"));
  EXPECT_THAT(f->positional, ElementsAre("rest", "--not-a-flag"));
  EXPECT_THAT(f->List("absent"), ElementsAre());
}

TEST(DataFlagsTest, TheLastValueWins) {
  auto f = Parse({"--workers", "2", "--workers", "3", "--json-keys", "a", "--json-keys", "b"});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->Get("workers"), "3");
  EXPECT_THAT(f->List("json-keys"), ElementsAre("b"));
}

TEST(DataFlagsTest, ErrorsNameTheFlagAndTheFix) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--bogus"}, "unknown flag --bogus (see mtctl data preprocess --help)"},
      {{"--bogus=1"}, "unknown flag --bogus (see mtctl data preprocess --help)"},
      {{"--quiet=yes"}, "--quiet takes no value"},
      {{"--output-prefix"}, "--output-prefix needs a value"},
      {{"--output-prefix", "--quiet"}, "--output-prefix needs a value"},
      {{"-o"}, "-o needs a value"},
      {{"--json-keys", "--quiet"}, "--json-keys needs a value"},
  };
  for (const auto& [args, message] : cases) {
    auto f = Parse(args);
    ASSERT_FALSE(f.ok()) << args[0];
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(f.status().message(), message);
  }
}

TEST(DataFlagsTest, IntFlagChecksItsRange) {
  auto f = Parse({"--workers", "0"});
  EXPECT_EQ(IntFlag(*f, "workers", 4, 1, 1024).status().message(),
            "--workers 0: expected an integer in [1, 1024]");
  f = Parse({"--workers", "two"});
  EXPECT_FALSE(IntFlag(*f, "workers", 4, 1, 1024).ok());
  f = Parse({"--workers", "8"});
  EXPECT_EQ(*IntFlag(*f, "workers", 4, 1, 1024), 8);
  f = Parse({});
  EXPECT_EQ(*IntFlag(*f, "workers", 4, 1, 1024), 4);
}

TEST(DataFlagsTest, IsFlagAndDatasetSuffix) {
  EXPECT_TRUE(IsFlag("--x"));
  EXPECT_TRUE(IsFlag("-o"));
  EXPECT_TRUE(IsFlag("-o=yaml"));
  EXPECT_FALSE(IsFlag("--"));
  EXPECT_FALSE(IsFlag("-"));
  EXPECT_FALSE(IsFlag("file"));
  EXPECT_EQ(StripDatasetSuffix("a/b.idx"), "a/b");
  EXPECT_EQ(StripDatasetSuffix("a/b.bin"), "a/b");
  EXPECT_EQ(StripDatasetSuffix("a/b"), "a/b");
}

}  // namespace
}  // namespace mt::client::data_cli
