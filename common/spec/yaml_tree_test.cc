#include "common/spec/yaml_tree.h"

#include <string>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::spec {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using Kind = YamlNode::Kind;

YamlNode One(const std::string& text) {
  auto docs = ParseYamlDocuments(text);
  EXPECT_TRUE(docs.ok()) << docs.status();
  if (!docs.ok() || docs->size() != 1) {
    ADD_FAILURE() << text << ": expected one document";
    return {};
  }
  return (*docs)[0];
}

TEST(YamlTreeTest, ReadsBlockAndFlowCollectionsWithTheirLines) {
  const YamlNode root =
      One("# a job\n"
          "name: demo\n"
          "model:\n"
          "  num_layers: 2\n"
          "data:\n"
          "  data_path: [0.3, /d/a, \"0.7\", '/d/b c']\n"
          "nodes:\n"
          "  - a\n"
          "  - {x: 1}\n");
  ASSERT_EQ(root.kind, Kind::kMap);
  ASSERT_THAT(root.entries, SizeIs(4));
  EXPECT_EQ(root.entries[0].first.text, "name");
  EXPECT_EQ(root.entries[0].second.text, "demo");
  EXPECT_EQ(root.entries[0].first.line, 2);
  const YamlNode& model = root.entries[1].second;
  ASSERT_EQ(model.kind, Kind::kMap);
  EXPECT_EQ(model.entries[0].first.text, "num_layers");
  EXPECT_EQ(model.entries[0].second.text, "2");
  EXPECT_EQ(model.entries[0].second.line, 4);
  const YamlNode& paths = root.entries[2].second.entries[0].second;
  ASSERT_EQ(paths.kind, Kind::kList);
  ASSERT_THAT(paths.items, SizeIs(4));
  EXPECT_EQ(paths.items[1].text, "/d/a");
  EXPECT_EQ(paths.items[2].text, "0.7");
  EXPECT_EQ(paths.items[3].text, "/d/b c");
  const YamlNode& nodes = root.entries[3].second;
  ASSERT_EQ(nodes.kind, Kind::kList);
  EXPECT_EQ(nodes.items[0].text, "a");
  ASSERT_EQ(nodes.items[1].kind, Kind::kMap);
  EXPECT_EQ(nodes.items[1].entries[0].second.text, "1");
  EXPECT_EQ(nodes.items[1].line, 9);
}

TEST(YamlTreeTest, PlainNullWordsAreNullAndQuotedOnesAreText) {
  const YamlNode root = One("a:\nb: ~\nc: null\nd: NULL\ne: \"\"\nf: 'null'\ng: !!null x\n");
  ASSERT_THAT(root.entries, SizeIs(7));
  for (int i : {0, 1, 2, 3, 6}) {
    EXPECT_EQ(root.entries[i].second.kind, Kind::kNull) << root.entries[i].first.text;
  }
  EXPECT_EQ(root.entries[4].second.kind, Kind::kScalar);
  EXPECT_EQ(root.entries[4].second.text, "");
  EXPECT_EQ(root.entries[5].second.kind, Kind::kScalar);
  EXPECT_EQ(root.entries[5].second.text, "null");
}

TEST(YamlTreeTest, BlockScalarsEscapesAndUnicodeKeepTheirText) {
  const YamlNode root =
      One("a: |\n  x,\n  y\nb: >-\n  p\n  q\nc: \"t\\tu\\n\\u00e9\"\nd: \xc3\xa9t\xc3\xa9\n");
  EXPECT_EQ(root.entries[0].second.text, "x,\ny\n");
  EXPECT_EQ(root.entries[1].second.text, "p q");
  EXPECT_EQ(root.entries[2].second.text, "t\tu\n\xc3\xa9");
  EXPECT_EQ(root.entries[3].second.text, "\xc3\xa9t\xc3\xa9");
}

TEST(YamlTreeTest, CountsDocumentsAndReadsNoneFromAnEmptyText) {
  auto none = ParseYamlDocuments("# only a comment\n");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(*none, SizeIs(0));
  auto two = ParseYamlDocuments("a: 1\n---\nb: 2\n");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_THAT(*two, SizeIs(2));
  auto empty_doc = ParseYamlDocuments("---\n");
  ASSERT_TRUE(empty_doc.ok()) << empty_doc.status();
  ASSERT_THAT(*empty_doc, SizeIs(1));
  EXPECT_EQ((*empty_doc)[0].kind, Kind::kNull);
}

TEST(YamlTreeTest, SyntaxErrorsNameTheLineAndColumn) {
  EXPECT_THAT(ParseYamlDocuments("a: b: c\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("YAML syntax error at line 1, column 5: mapping values are not "
                                 "allowed in this context")));
  EXPECT_THAT(ParseYamlDocuments("a: [1, 2\nb: 3\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("YAML syntax error at line")));
  // The reader's errors (control characters, bad UTF-8) name the byte.
  EXPECT_THAT(
      ParseYamlDocuments(std::string("a: \0b", 5)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("YAML syntax error at byte 3: control characters are not allowed")));
  EXPECT_THAT(ParseYamlDocuments("a: \xff\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at byte 3")));
}

TEST(YamlTreeTest, RefusesAliasesAndDeepNesting) {
  EXPECT_THAT(ParseYamlDocuments("a: &x [1, 2]\nb: *x\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("YAML alias *x at line 2: aliases are not supported")));
  // An anchor alone is read past.
  const YamlNode anchored = One("a: &x 1\n");
  EXPECT_EQ(anchored.entries[0].second.text, "1");
  const std::string deep =
      std::string(kMaxYamlDepth + 1, '[') + std::string(kMaxYamlDepth + 1, ']');
  EXPECT_THAT(ParseYamlDocuments(deep),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nesting deeper than 64")));
  const std::string ok = std::string(kMaxYamlDepth, '[') + std::string(kMaxYamlDepth, ']');
  EXPECT_TRUE(ParseYamlDocuments(ok).ok());
}

TEST(YamlTreeTest, BoundsTheNumberOfValues) {
  std::string many = "[";
  for (int i = 0; i < 100001; ++i) many += "1,";
  many += "1]";
  EXPECT_THAT(ParseYamlDocuments(many),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than 100000 values")));
}

}  // namespace
}  // namespace mt::spec
