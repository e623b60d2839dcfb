// mtctl's printers, written once: `-o table|json|yaml` for protobuf messages (the coordinator's
// answers) and for the ordered JSON documents that the local `mtctl data` verbs build, plus the
// plain-text table. Results go to stdout; nothing here writes to stderr.
// Free functions are thread-safe; JsonValue is thread-compatible.
#ifndef MT_CLIENT_OUTPUT_H_
#define MT_CLIENT_OUTPUT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace mt::client {

enum class OutputFormat { kTable, kJson, kYaml };

// "table", "json" or "yaml"; anything else is InvalidArgument naming -o and the choices.
absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view name);

// A message as JSON (proto3 JSON mapping, field names as in the .proto) or YAML.
std::string ToJson(const google::protobuf::Message& message);
std::string ToYaml(const google::protobuf::Message& message);
// Prints a message in JSON or YAML on stdout.
void PrintStructured(const google::protobuf::Message& message, OutputFormat format);

// A plain-text table, columns padded to their widest cell, two spaces between columns.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

// A JSON string literal of `s` (mt::JsonQuote); bytes that are not UTF-8 become U+FFFD first,
// since datasets and token pieces may hold any bytes and the output must stay valid JSON.
std::string JsonString(absl::string_view s);

// A small JSON value whose object keys keep the order they were added in (protobuf's Struct
// sorts them), printed as JSON or as block-style YAML.
class JsonValue {
 public:
  static JsonValue Int(int64_t v);
  // Fixed notation with up to `decimals` digits after the point (no exponents, no trailing
  // zeros); not finite → null.
  static JsonValue Num(double v, int decimals = 3);
  static JsonValue Bool(bool v);
  static JsonValue Null();
  static JsonValue Str(absl::string_view v);
  static JsonValue Object();
  static JsonValue Array();

  JsonValue& Set(const std::string& key, JsonValue v);  // objects
  JsonValue& Push(JsonValue v);                         // arrays

  std::string Json(int indent = 0) const;
  // Block-style YAML; strings double-quoted with JSON's escapes (valid YAML too).
  std::string Yaml(int indent = 0) const;
  // JSON (with a final newline) or YAML on stdout.
  void Print(OutputFormat format) const;

 private:
  enum Kind { kLiteral, kString, kObject, kArray };  // kLiteral: numbers, true, false, null
  JsonValue(Kind kind, std::string scalar) : kind_(kind), scalar_(std::move(scalar)) {}

  Kind kind_;
  std::string scalar_;
  std::vector<std::pair<std::string, JsonValue>> items_;
};

}  // namespace mt::client

#endif  // MT_CLIENT_OUTPUT_H_
