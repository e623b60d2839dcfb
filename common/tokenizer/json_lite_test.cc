#include "common/tokenizer/json_lite.h"

#include <string>
#include <utility>
#include <vector>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::tokenizer {
namespace {

using ::mt::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(JsonLiteTest, StringToIntObject) {
  MT_ASSERT_OK_AND_ASSIGN(
      auto entries,
      ParseJsonStringToIntObject(
          R"( {"a": 0, "\"": 1, "\\": 2, "\u0120x": 3 ,"\ud83d\ude00":4, "\/\b\f\n\r\t": -5} )"));
  EXPECT_THAT(entries, ElementsAre(Pair("a", 0), Pair("\"", 1), Pair("\\", 2), Pair("\u0120x", 3),
                                   Pair("\U0001F600", 4), Pair("/\b\f\n\r\t", -5)));
  MT_ASSERT_OK_AND_ASSIGN(auto empty, ParseJsonStringToIntObject("{}"));
  EXPECT_TRUE(empty.empty());
}

TEST(JsonLiteTest, LoneSurrogatesBecomeReplacementCharacter) {
  MT_ASSERT_OK_AND_ASSIGN(auto entries,
                          ParseJsonStringToIntObject(R"({"\ud800x": 0, "\udc00\ud800\u0041": 1})"));
  EXPECT_THAT(entries, ElementsAre(Pair("\uFFFDx", 0), Pair("\uFFFD\uFFFD"
                                                            "A",
                                                            1)));
}

TEST(JsonLiteTest, Errors) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "expected '{', got end of input"},
      {"[]", "expected '{'"},
      {R"({"a": 1.5})", "fraction"},
      {R"({"a": "x"})", "expected an integer"},
      {R"({"a": 1,})", "expected '\"'"},
      {R"({"a" 1})", "expected ':'"},
      {R"({"a": 1} x)", "trailing characters"},
      {R"({"a\q": 1})", "bad escape"},
      {R"({"a\u12G4": 1})", "bad hex digit"},
      {"{\"a\nb\": 1}", "raw control character"},
      {R"({"abc)", "unterminated string"},
      {R"({"a": 01})", "leading zero"},
      {R"({"a": 99999999999999999999})", "out of range"},
  };
  for (const auto& [json, message] : cases) {
    EXPECT_THAT(ParseJsonStringToIntObject(json),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)))
        << json;
  }
  EXPECT_THAT(ParseJsonStringToIntObject("{\n\"a\": 1,\n\"b\": x}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 3")));
}

TEST(JsonLiteTest, ExtractStringField) {
  const std::string line =
      R"({"year": 1790, "meta": {"text": 1, "x": [1, "a", {"b": null}]}, "ok": true,)"
      R"( "text": "Fellow-Citizens \"of\" the\nSenate \u00e9", "f": -1.5e+3})";
  MT_ASSERT_OK_AND_ASSIGN(std::string text, ExtractJsonStringField(line, "text"));
  EXPECT_EQ(text, "Fellow-Citizens \"of\" the\nSenate \u00e9");
  MT_ASSERT_OK_AND_ASSIGN(std::string last,
                          ExtractJsonStringField(R"({"text": "a", "text": "b"})", "text"));
  EXPECT_EQ(last, "b");
  EXPECT_THAT(ExtractJsonStringField(R"({"txt": "a"})", "text"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("\"text\"")));
  EXPECT_THAT(ExtractJsonStringField(R"({"text": 3})", "text"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a string")));
  EXPECT_THAT(ExtractJsonStringField(R"({"text": "a")", "text"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected '}'")));
  EXPECT_THAT(ExtractJsonStringField(R"({"a": tru})", "text"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unexpected character")));
  // Raw bytes (even invalid UTF-8) pass through unchanged.
  MT_ASSERT_OK_AND_ASSIGN(std::string raw,
                          ExtractJsonStringField("{\"text\": \"\xFF\xC3\xA9\"}", "text"));
  EXPECT_EQ(raw, "\xFF\xC3\xA9");
  std::string deep(200, '[');
  EXPECT_THAT(ExtractJsonStringField("{\"a\": " + deep + "}", "text"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too deep")));
}

}  // namespace
}  // namespace mt::tokenizer
