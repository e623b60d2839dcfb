#include "common/spec/yaml_tree.h"

#include <yaml.h>

#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mt::spec {
namespace {

using absl::StrCat;

// A job spec has a few hundred nodes; this bounds the tree whatever the text.
constexpr size_t kMaxNodes = 100000;

// libyaml's parser and event, released on every path.
class Parser {
 public:
  explicit Parser(absl::string_view text) {
    ok_ = yaml_parser_initialize(&parser_) != 0;
    if (ok_) {
      yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()),
                                   text.size());
    }
  }
  ~Parser() { yaml_parser_delete(&parser_); }
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;

  bool ok() const { return ok_; }
  bool Next(yaml_event_t* event) { return yaml_parser_parse(&parser_, event) != 0; }

  absl::Status Error() const {
    const yaml_parser_t& p = parser_;
    const std::string what = p.problem != nullptr ? p.problem : "unreadable YAML";
    if (p.error == YAML_READER_ERROR) {  // bad UTF-8 or a control character
      return absl::InvalidArgumentError(StrCat("YAML syntax error at byte ", p.problem_offset, ": ",
                                               what, " (a job spec is UTF-8 text)"));
    }
    if (p.error == YAML_MEMORY_ERROR) {
      return absl::ResourceExhaustedError("out of memory while reading the YAML job spec");
    }
    std::string context;
    if (p.context != nullptr) {
      context = StrCat(" (", p.context, " at line ", p.context_mark.line + 1, ", column ",
                       p.context_mark.column + 1, ")");
    }
    return absl::InvalidArgumentError(StrCat("YAML syntax error at line ", p.problem_mark.line + 1,
                                             ", column ", p.problem_mark.column + 1, ": ", what,
                                             context));
  }

 private:
  yaml_parser_t parser_;
  bool ok_ = false;
};

class Event {
 public:
  Event() { std::memset(&event_, 0, sizeof(event_)); }
  ~Event() { yaml_event_delete(&event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  yaml_event_t* get() { return &event_; }

 private:
  yaml_event_t event_;
};

bool IsNullScalar(const yaml_event_t& e, absl::string_view text) {
  const char* tag = reinterpret_cast<const char*>(e.data.scalar.tag);
  if (tag != nullptr) return std::strcmp(tag, YAML_NULL_TAG) == 0;
  if (e.data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

// Builds the documents from the events: open collections on a stack, each value added to the
// collection on top (a mapping alternates key, value).
class TreeBuilder {
 public:
  absl::Status Add(yaml_event_t& e) {
    const int line = static_cast<int>(e.start_mark.line) + 1;
    switch (e.type) {
      case YAML_SCALAR_EVENT: {
        YamlNode n;
        n.line = line;
        n.text.assign(reinterpret_cast<const char*>(e.data.scalar.value), e.data.scalar.length);
        n.kind = IsNullScalar(e, n.text) ? YamlNode::Kind::kNull : YamlNode::Kind::kScalar;
        if (n.IsNull()) n.text.clear();
        return Place(std::move(n));
      }
      case YAML_SEQUENCE_START_EVENT:
        return Open(YamlNode::Kind::kList, line);
      case YAML_MAPPING_START_EVENT:
        return Open(YamlNode::Kind::kMap, line);
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT: {
        YamlNode n = std::move(open_.back().node);
        open_.pop_back();
        return Place(std::move(n));
      }
      case YAML_ALIAS_EVENT:
        return absl::InvalidArgumentError(
            StrCat("YAML alias *", reinterpret_cast<const char*>(e.data.alias.anchor), " at line ",
                   line, ": aliases are not supported in a job spec; write the value out"));
      case YAML_DOCUMENT_END_EVENT:
        if (root_.has_value()) docs_.push_back(std::move(*root_));
        root_.reset();
        return absl::OkStatus();
      default:  // stream and document starts, the stream's end
        return absl::OkStatus();
    }
  }

  std::vector<YamlNode> TakeDocuments() { return std::move(docs_); }

 private:
  struct OpenNode {
    YamlNode node;
    std::optional<YamlNode> key;  // a mapping's key waiting for its value
  };

  absl::Status Open(YamlNode::Kind kind, int line) {
    if (open_.size() >= static_cast<size_t>(kMaxYamlDepth)) {
      return absl::InvalidArgumentError(StrCat("YAML nesting deeper than ", kMaxYamlDepth,
                                               " levels at line ", line,
                                               ": a job spec is a few levels deep"));
    }
    OpenNode o;
    o.node.kind = kind;
    o.node.line = line;
    open_.push_back(std::move(o));
    return Count(line);
  }

  absl::Status Place(YamlNode n) {
    if (open_.empty()) {
      root_ = std::move(n);
      return absl::OkStatus();
    }
    OpenNode& top = open_.back();
    const int line = n.line;
    if (top.node.IsList()) {
      top.node.items.push_back(std::move(n));
    } else if (!top.key.has_value()) {
      top.key = std::move(n);
    } else {
      top.node.entries.emplace_back(std::move(*top.key), std::move(n));
      top.key.reset();
    }
    return Count(line);
  }

  absl::Status Count(int line) {
    if (++nodes_ > kMaxNodes) {
      return absl::InvalidArgumentError(StrCat("the YAML text holds more than ", kMaxNodes,
                                               " values (at line ", line,
                                               "); a job spec holds a few hundred"));
    }
    return absl::OkStatus();
  }

  std::vector<OpenNode> open_;
  std::optional<YamlNode> root_;
  std::vector<YamlNode> docs_;
  size_t nodes_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<YamlNode>> ParseYamlDocuments(absl::string_view text) {
  Parser parser(text);
  if (!parser.ok()) {
    return absl::ResourceExhaustedError("out of memory while reading the YAML job spec");
  }
  TreeBuilder builder;
  while (true) {
    Event event;
    if (!parser.Next(event.get())) return parser.Error();
    if (absl::Status s = builder.Add(*event.get()); !s.ok()) return s;
    if (event.get()->type == YAML_STREAM_END_EVENT) break;
  }
  return builder.TakeDocuments();
}

}  // namespace mt::spec
