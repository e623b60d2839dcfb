// mtctl's printers (output.h): protobuf messages as JSON/YAML, the ordered JSON documents of
// the data verbs, and the plain-text table.
#include "client/output.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mt/v1/client_service.pb.h"

namespace mt::client {
namespace {

using ::testing::HasSubstr;

mt::v1::ClusterInfo SmallMessage() {
  mt::v1::ClusterInfo info;
  info.set_version("1.2");
  info.set_workers_total(3);
  return info;
}

TEST(OutputTest, ParseOutputFormat) {
  EXPECT_EQ(*ParseOutputFormat("table"), OutputFormat::kTable);
  EXPECT_EQ(*ParseOutputFormat("json"), OutputFormat::kJson);
  EXPECT_EQ(*ParseOutputFormat("yaml"), OutputFormat::kYaml);
  const absl::StatusOr<OutputFormat> bad = ParseOutputFormat("xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "-o xml: choose table, json or yaml");
}

TEST(OutputTest, MessageAsJsonKeepsProtoFieldNames) {
  const std::string json = ToJson(SmallMessage());
  EXPECT_THAT(json, HasSubstr("\"version\": \"1.2\""));
  EXPECT_THAT(json, HasSubstr("\"workers_total\": 3"));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("workersTotal")));
}

TEST(OutputTest, MessageAsYaml) {
  EXPECT_EQ(ToYaml(SmallMessage()), "version: 1.2\nworkers_total: 3\n");
}

TEST(OutputTest, TablePadsColumnsToTheWidestCell) {
  EXPECT_EQ(FormatTable({"ID", "STATE"}, {{"job-1", "RUNNING"}, {"j2", "-"}}),
            "ID     STATE\n"
            "job-1  RUNNING\n"
            "j2     -\n");
  EXPECT_EQ(FormatTable({"A"}, {}), "A\n");
}

TEST(OutputTest, JsonStringReplacesBytesThatAreNotUtf8) {
  EXPECT_EQ(JsonString("a\"b\n"), "\"a\\\"b\\n\"");
  EXPECT_EQ(JsonString("\xc3\xa9"), "\"\xc3\xa9\"");
  EXPECT_EQ(JsonString("a\xff"
                       "b"),
            "\"a\xEF\xBF\xBD"
            "b\"");
}

JsonValue SmallDocument() {
  JsonValue list = JsonValue::Array();
  list.Push(JsonValue::Int(1)).Push(JsonValue::Str("two"));
  JsonValue doc = JsonValue::Object();
  doc.Set("name", JsonValue::Str("x\ty"))
      .Set("share", JsonValue::Num(0.125, 6))
      .Set("whole", JsonValue::Num(2.0))
      .Set("missing", JsonValue::Num(std::nan("")))
      .Set("ok", JsonValue::Bool(true))
      .Set("items", std::move(list))
      .Set("empty", JsonValue::Array())
      .Set("2nd key", JsonValue::Null());
  return doc;
}

TEST(OutputTest, JsonValueKeepsKeyOrder) {
  EXPECT_EQ(SmallDocument().Json(),
            "{\n"
            "  \"name\": \"x\\ty\",\n"
            "  \"share\": 0.125,\n"
            "  \"whole\": 2,\n"
            "  \"missing\": null,\n"
            "  \"ok\": true,\n"
            "  \"items\": [\n"
            "    1,\n"
            "    \"two\"\n"
            "  ],\n"
            "  \"empty\": [],\n"
            "  \"2nd key\": null\n"
            "}");
}

TEST(OutputTest, JsonValueAsYaml) {
  EXPECT_EQ(SmallDocument().Yaml(),
            "name: \"x\\ty\"\n"
            "share: 0.125\n"
            "whole: 2\n"
            "missing: null\n"
            "ok: true\n"
            "items:\n"
            "  - 1\n"
            "  - \"two\"\n"
            "empty: []\n"
            "\"2nd key\": null\n");
}

TEST(OutputTest, NegativeZeroPrintsAsZero) {
  EXPECT_EQ(JsonValue::Num(-0.0001, 2).Json(), "0");
  EXPECT_EQ(JsonValue::Num(-1.5, 1).Json(), "-1.5");
}

}  // namespace
}  // namespace mt::client
