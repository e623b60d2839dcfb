#include "client/output.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/json.h"
#include "common/data/preprocess.h"
#include "google/protobuf/util/json_util.h"
#include "yaml-cpp/yaml.h"

namespace mt::client {

absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view name) {
  if (name == "table") return OutputFormat::kTable;
  if (name == "json") return OutputFormat::kJson;
  if (name == "yaml") return OutputFormat::kYaml;
  return absl::InvalidArgumentError(absl::StrCat("-o ", name, ": choose table, json or yaml"));
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, opts);
  return out;
}

namespace {

// JSON is YAML: re-emit the JSON tree in block style.
void EmitYaml(const YAML::Node& node, YAML::Emitter* out) {
  if (node.IsMap()) {
    *out << YAML::BeginMap;
    for (const auto& kv : node) {
      *out << YAML::Key << kv.first.as<std::string>() << YAML::Value;
      EmitYaml(kv.second, out);
    }
    *out << YAML::EndMap;
  } else if (node.IsSequence()) {
    *out << YAML::BeginSeq;
    for (const auto& item : node) EmitYaml(item, out);
    *out << YAML::EndSeq;
  } else if (node.IsScalar()) {
    *out << node.as<std::string>();
  } else {
    *out << YAML::Null;
  }
}

// Plain identifiers as they are, anything else quoted.
std::string YamlKey(const std::string& key) {
  bool plain = !key.empty() && !absl::ascii_isdigit(static_cast<unsigned char>(key[0]));
  for (char c : key) {
    plain = plain && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_');
  }
  return plain ? key : JsonString(key);
}

}  // namespace

std::string ToYaml(const google::protobuf::Message& message) {
  YAML::Node tree = YAML::Load(ToJson(message));
  YAML::Emitter out;
  EmitYaml(tree, &out);
  return std::string(out.c_str()) + "\n";
}

void PrintStructured(const google::protobuf::Message& message, OutputFormat format) {
  std::cout << (format == OutputFormat::kYaml ? ToYaml(message) : ToJson(message));
  std::cout.flush();
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size(), 0);
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t i = 0; i < cells.size(); ++i) {
      s += cells[i];
      if (i + 1 < cells.size()) s += std::string(width[i] - cells[i].size() + 2, ' ');
    }
    return s + "\n";
  };
  std::string out = line(header);
  for (const auto& row : rows) out += line(row);
  return out;
}

std::string JsonString(absl::string_view s) {
  size_t bad = 0;
  if (data::internal::IsValidUtf8(s, &bad)) return JsonQuote(s);
  std::string clean;
  while (!s.empty()) {
    size_t off = 0;
    if (data::internal::IsValidUtf8(s, &off)) {
      clean.append(s.data(), s.size());
      break;
    }
    clean.append(s.data(), off);
    clean += "\xEF\xBF\xBD";
    s.remove_prefix(off + 1);
  }
  return JsonQuote(clean);
}

JsonValue JsonValue::Int(int64_t v) { return JsonValue(kLiteral, absl::StrCat(v)); }

JsonValue JsonValue::Num(double v, int decimals) {
  if (!std::isfinite(v)) return Null();
  std::string s = absl::StrFormat("%.*f", decimals, v);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return JsonValue(kLiteral, s == "-0" ? "0" : s);
}

JsonValue JsonValue::Bool(bool v) { return JsonValue(kLiteral, v ? "true" : "false"); }
JsonValue JsonValue::Null() { return JsonValue(kLiteral, "null"); }
JsonValue JsonValue::Str(absl::string_view v) { return JsonValue(kString, std::string(v)); }
JsonValue JsonValue::Object() { return JsonValue(kObject, ""); }
JsonValue JsonValue::Array() { return JsonValue(kArray, ""); }

JsonValue& JsonValue::Set(const std::string& key, JsonValue v) {
  items_.emplace_back(key, std::move(v));
  return *this;
}

JsonValue& JsonValue::Push(JsonValue v) {
  items_.emplace_back("", std::move(v));
  return *this;
}

std::string JsonValue::Json(int indent) const {
  switch (kind_) {
    case kLiteral:
      return scalar_;
    case kString:
      return JsonString(scalar_);
    case kObject:
    case kArray:
      break;
  }
  if (items_.empty()) return kind_ == kObject ? "{}" : "[]";
  const std::string pad(indent + 2, ' ');
  std::string s = kind_ == kObject ? "{\n" : "[\n";
  for (size_t i = 0; i < items_.size(); ++i) {
    absl::StrAppend(&s, pad);
    if (kind_ == kObject) absl::StrAppend(&s, JsonString(items_[i].first), ": ");
    absl::StrAppend(&s, items_[i].second.Json(indent + 2), i + 1 < items_.size() ? ",\n" : "\n");
  }
  return s + std::string(indent, ' ') + (kind_ == kObject ? "}" : "]");
}

std::string JsonValue::Yaml(int indent) const {
  std::string s;
  const std::string pad(indent, ' ');
  for (const auto& [key, v] : items_) {
    absl::StrAppend(&s, pad, kind_ == kObject ? YamlKey(key) + ":" : "-");
    if ((v.kind_ == kObject || v.kind_ == kArray) && !v.items_.empty()) {
      absl::StrAppend(&s, "\n", v.Yaml(indent + 2));
    } else {
      absl::StrAppend(&s, " ", v.Json(), "\n");
    }
  }
  return s;
}

void JsonValue::Print(OutputFormat format) const {
  std::cout << (format == OutputFormat::kYaml ? Yaml() : Json() + "\n");
  std::cout.flush();
}

}  // namespace mt::client
