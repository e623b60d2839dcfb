#include "common/spec/yaml_spec.h"

#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/spec/spec_internal.h"
#include "common/spec/yaml_tree.h"
// yaml-cpp 0.7's node headers trip GCC 12's -Wdangling-pointer (a false positive in its
// iterator code); silence it for these headers only.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#include "yaml-cpp/yaml.h"
#pragma GCC diagnostic pop
#else
#include "yaml-cpp/yaml.h"
#endif

namespace mt::spec {
namespace {

using absl::StrCat;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using internal::Quote;

constexpr size_t kMaxErrors = 50;

// Short keys accepted in place of a field name, by message.
const std::map<std::string, std::map<std::string, std::string>>& Aliases() {
  static const auto* aliases = new std::map<std::string, std::map<std::string, std::string>>{
      {"mt.v1.ParallelSpec",
       {{"tp", "tensor_model_parallel_size"},
        {"pp", "pipeline_model_parallel_size"},
        {"dp", "data_parallel_size"},
        {"cp", "context_parallel_size"}}},
  };
  return *aliases;
}

// Integer fields where "auto" means 0.
bool AcceptsAuto(const FieldDescriptor* field) {
  return field->full_name() == "mt.v1.ParallelSpec.data_parallel_size" ||
         field->full_name() == "mt.v1.ParallelSpec.world_size";
}

bool IsDataPathList(const FieldDescriptor* field) {
  return field->is_repeated() && field->message_type() == mt::v1::DataPath::descriptor();
}

std::string Join(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : StrCat(path, ".", key);
}

std::string LineOf(const YamlNode& node) {
  if (node.line <= 0) return "";
  return StrCat(" [line ", node.line, "]");
}

// What a scalar field expects, for "expected X, got a list".
std::string Expected(const FieldDescriptor* field) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return AcceptsAuto(field) ? "an integer or auto" : "an integer";
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return "a number";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_ENUM: {
      std::vector<std::string> names;
      for (int i = 0; i < field->enum_type()->value_count(); ++i) {
        if (field->enum_type()->value(i)->number() != 0) {
          names.push_back(internal::EnumShortName(field->enum_type()->value(i)));
        }
      }
      return StrCat("one of ", absl::StrJoin(names, ", "));
    }
    case FieldDescriptor::CPPTYPE_STRING:
      return "a string";
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return "a mapping (key: value)";
  }
  return "a value";
}

std::string Got(const YamlNode& node) {
  switch (node.kind) {
    case YamlNode::Kind::kMap:
      return "a mapping";
    case YamlNode::Kind::kList:
      return "a list";
    case YamlNode::Kind::kScalar:
      return Quote(node.text);
    case YamlNode::Kind::kNull:
      break;
  }
  return "nothing";
}

class Reader {
 public:
  void ReadMessage(const YamlNode& node, const std::string& path, Message* message) {
    const Descriptor* type = message->GetDescriptor();
    const Reflection* r = message->GetReflection();
    std::map<int, std::pair<std::string, std::string>> seen;  // number -> (key, line)
    std::map<const google::protobuf::OneofDescriptor*, std::string> oneofs_seen;
    for (const auto& [key_node, value] : node.entries) {
      if (!key_node.IsScalar()) {
        Error(StrCat(path.empty() ? "top level" : path, ": keys must be plain names, got ",
                     Got(key_node), LineOf(key_node)));
        continue;
      }
      const std::string& key = key_node.text;
      const std::string full = Join(path, key);
      const std::string line = LineOf(key_node);
      const FieldDescriptor* field = FindField(type, key);
      if (field == nullptr) {
        UnknownKey(type, path, key, line);
        continue;
      }
      if (auto s = seen.find(field->number()); s != seen.end()) {
        const std::string first = Join(path, s->second.first);
        Error(StrCat(full, ": duplicate key",
                     first == full
                         ? StrCat(" (first given", s->second.second, ")")
                         : StrCat(" (", first, " is the same field", s->second.second, ")"),
                     line));
        continue;
      }
      seen[field->number()] = {key, line};
      if (const auto* oneof = field->real_containing_oneof(); oneof != nullptr) {
        if (auto o = oneofs_seen.find(oneof); o != oneofs_seen.end()) {
          Error(
              StrCat(full, ": exclusive with ", o->second, " (one of ", oneof->name(), ")", line));
          continue;
        }
        oneofs_seen[oneof] = full;
      }
      if (value.IsNull()) {
        warnings_.push_back(StrCat(full, ": empty value, left unset", line));
        continue;
      }
      ReadField(value, full, line, message, field, r);
    }
  }

  void Error(std::string error) {
    if (errors_.size() < kMaxErrors) errors_.push_back(std::move(error));
  }

  std::vector<std::string>& errors() { return errors_; }
  std::vector<std::string>& warnings() { return warnings_; }

 private:
  static const FieldDescriptor* FindField(const Descriptor* type, const std::string& key) {
    if (const FieldDescriptor* f = type->FindFieldByName(key); f != nullptr) return f;
    const auto& aliases = Aliases();
    if (auto m = aliases.find(type->full_name()); m != aliases.end()) {
      if (auto a = m->second.find(key); a != m->second.end()) {
        return type->FindFieldByName(a->second);
      }
    }
    return nullptr;
  }

  void UnknownKey(const Descriptor* type, const std::string& path, const std::string& key,
                  const std::string& line) {
    std::vector<std::string> names;
    for (int i = 0; i < type->field_count(); ++i) names.push_back(type->field(i)->name());
    // Megatron spellings ("num-layers") and camelCase ("numLayers") map to the snake_case name.
    std::string snake;
    for (char c : key) {
      if (c == '-') {
        snake.push_back('_');
      } else if (absl::ascii_isupper(static_cast<unsigned char>(c))) {
        if (!snake.empty()) snake.push_back('_');
        snake.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
      } else {
        snake.push_back(c);
      }
    }
    while (!snake.empty() && snake[0] == '_') snake.erase(0, 1);
    std::string hint;
    if (type->FindFieldByName(snake) != nullptr) {
      hint = snake;
    } else {
      hint = internal::NearestName(key, names);
    }
    if (!hint.empty()) {
      Error(StrCat(Join(path, key), ": unknown key (did you mean ", Join(path, hint), "?)", line));
    } else {
      std::vector<std::string> keys = names;
      const auto& aliases = Aliases();
      if (auto m = aliases.find(type->full_name()); m != aliases.end()) {
        for (const auto& [alias, unused] : m->second) keys.push_back(alias);
      }
      Error(StrCat(Join(path, key), ": unknown key; expected one of ", absl::StrJoin(keys, ", "),
                   line));
    }
  }

  void ReadField(const YamlNode& value, const std::string& full, const std::string& line,
                 Message* message, const FieldDescriptor* field, const Reflection* r) {
    if (IsDataPathList(field)) {
      ReadDataPaths(value, full, line, message, field, r);
      return;
    }
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (field->is_repeated()) {
        if (!value.IsList()) {
          Error(StrCat(full, ": expected a list of mappings, got ", Got(value), line));
          return;
        }
        for (size_t i = 0; i < value.items.size(); ++i) {
          const std::string at = StrCat(full, "[", i, "]");
          if (!value.items[i].IsMap()) {
            Error(StrCat(at, ": expected a mapping (key: value), got ", Got(value.items[i]), line));
            continue;
          }
          ReadMessage(value.items[i], at, r->AddMessage(message, field));
        }
        return;
      }
      if (!value.IsMap()) {
        Error(StrCat(full, ": expected a mapping (key: value), got ", Got(value), line));
        return;
      }
      ReadMessage(value, full, r->MutableMessage(message, field));
      return;
    }
    if (field->is_repeated()) {
      if (!value.IsList()) {
        Error(StrCat(full, ": expected a list of ", Expected(field), ", got ", Got(value), line));
        return;
      }
      for (size_t i = 0; i < value.items.size(); ++i) {
        SetScalar(value.items[i], StrCat(full, "[", i, "]"), line, message, field);
      }
      return;
    }
    SetScalar(value, full, line, message, field);
  }

  void SetScalar(const YamlNode& value, const std::string& at, const std::string& line,
                 Message* message, const FieldDescriptor* field) {
    if (!value.IsScalar()) {
      Error(StrCat(at, ": expected ", Expected(field), ", got ", Got(value), line));
      return;
    }
    const std::string& text = value.text;
    if (AcceptsAuto(field) && absl::AsciiStrToLower(text) == "auto") {
      message->GetReflection()->SetInt32(message, field, 0);
      return;
    }
    if (absl::Status s = internal::SetScalarFromText(message, field, text); !s.ok()) {
      Error(StrCat(at, ": ", s.message(), line));
    }
  }

  // A prefix (weight 1), a list of {weight, prefix}, or Megatron's [w1, p1, w2, p2, ...].
  void ReadDataPaths(const YamlNode& value, const std::string& full, const std::string& line,
                     Message* message, const FieldDescriptor* field, const Reflection* r) {
    if (value.IsScalar()) {
      auto* path = static_cast<mt::v1::DataPath*>(r->AddMessage(message, field));
      path->set_weight(1.0);
      path->set_prefix(value.text);
      return;
    }
    if (value.IsMap()) {
      ReadMessage(value, StrCat(full, "[0]"), r->AddMessage(message, field));
      return;
    }
    if (!value.IsList()) {
      Error(StrCat(full, ": expected a dataset prefix or a list, got ", Got(value), line));
      return;
    }
    bool all_scalars = true;
    for (size_t i = 0; i < value.items.size(); ++i)
      all_scalars = all_scalars && value.items[i].IsScalar();
    if (all_scalars) {
      std::vector<std::string> items;
      for (size_t i = 0; i < value.items.size(); ++i) items.push_back(value.items[i].text);
      if (items.empty()) return;
      auto paths = internal::ParseFlatDataPaths(
          items, [&](int i) { return i < 0 ? full : StrCat(full, "[", i, "]"); });
      if (!paths.ok()) {
        Error(StrCat(paths.status().message(), line));
        return;
      }
      for (auto& p : *paths) {
        *static_cast<mt::v1::DataPath*>(r->AddMessage(message, field)) = std::move(p);
      }
      return;
    }
    for (size_t i = 0; i < value.items.size(); ++i) {
      const std::string at = StrCat(full, "[", i, "]");
      if (!value.items[i].IsMap()) {
        Error(StrCat(at, ": expected a {weight, prefix} mapping like the other entries, got ",
                     Got(value.items[i]), line));
        continue;
      }
      ReadMessage(value.items[i], at, r->AddMessage(message, field));
    }
  }

  std::vector<std::string> errors_;
  std::vector<std::string> warnings_;
};

void EmitScalar(YAML::Emitter& out, const Message& message, const FieldDescriptor* field,
                int index) {
  const std::string text = internal::ScalarText(message, field, index);
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
    // Words YAML reads as null would come back as an unset field.
    const std::string lower = absl::AsciiStrToLower(text);
    if (text.empty() || lower == "~" || lower == "null") {
      out << YAML::DoubleQuoted << text;
      return;
    }
  }
  out << text;
}

void EmitMessage(YAML::Emitter& out, const Message& message) {
  const Reflection* r = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(message, &fields);
  // A present but empty message is written "{}" so that it stays present.
  if (fields.empty()) out << YAML::Flow;
  out << YAML::BeginMap;
  for (const FieldDescriptor* f : fields) {
    out << YAML::Key << f->name() << YAML::Value;
    if (IsDataPathList(f)) {
      const int n = r->FieldSize(message, f);
      const auto& first =
          static_cast<const mt::v1::DataPath&>(r->GetRepeatedMessage(message, f, 0));
      if (n == 1 && first.weight() == 1.0 && !first.prefix().empty()) {
        EmitScalar(out, first, first.GetDescriptor()->FindFieldByName("prefix"), -1);
        continue;
      }
      out << YAML::BeginSeq;
      for (int i = 0; i < n; ++i) {
        out << YAML::Flow;
        EmitMessage(out, r->GetRepeatedMessage(message, f, i));
      }
      out << YAML::EndSeq;
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        out << YAML::BeginSeq;
        for (int i = 0; i < r->FieldSize(message, f); ++i) {
          EmitMessage(out, r->GetRepeatedMessage(message, f, i));
        }
        out << YAML::EndSeq;
      } else {
        EmitMessage(out, r->GetMessage(message, f));
      }
    } else if (f->is_repeated()) {
      out << YAML::Flow << YAML::BeginSeq;
      for (int i = 0; i < r->FieldSize(message, f); ++i) EmitScalar(out, message, f, i);
      out << YAML::EndSeq;
    } else {
      EmitScalar(out, message, f, -1);
    }
  }
  out << YAML::EndMap;
}

}  // namespace

absl::StatusOr<ParsedSpec> ParseYamlSpec(absl::string_view yaml) {
  if (yaml.size() > kMaxYamlSpecBytes) {
    return absl::InvalidArgumentError(
        StrCat("the job spec is ", yaml.size(), " bytes, over the limit of ", kMaxYamlSpecBytes));
  }
  MT_ASSIGN_OR_RETURN(std::vector<YamlNode> docs, ParseYamlDocuments(yaml));
  if (docs.size() > 1) {
    return absl::InvalidArgumentError(
        StrCat("found ", docs.size(),
               " YAML documents; a job spec is exactly one (remove the '---' separators)"));
  }
  if (docs.empty() || docs[0].IsNull()) {
    return absl::InvalidArgumentError(
        "the job spec is empty: expected a mapping with model:, "
        "parallel:, training:, data: ...");
  }
  if (!docs[0].IsMap()) {
    return absl::InvalidArgumentError(
        StrCat("the job spec must be a mapping (name:, model:, training:, ...), got ", Got(docs[0]),
               LineOf(docs[0])));
  }
  ParsedSpec parsed;
  Reader reader;
  reader.ReadMessage(docs[0], "", &parsed.spec);
  if (!reader.errors().empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(reader.errors(), "\n"));
  }
  parsed.warnings = std::move(reader.warnings());
  return parsed;
}

std::string SpecToYaml(const mt::v1::JobSpec& spec) {
  YAML::Emitter out;
  out.SetIndent(2);
  EmitMessage(out, spec);
  std::string text = out.c_str();
  if (!text.empty() && text.back() != '\n') text.push_back('\n');
  return text;
}

}  // namespace mt::spec
