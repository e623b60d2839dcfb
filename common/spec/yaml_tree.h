// A YAML document read into a plain tree, for the job spec's front end (yaml_spec.cc).
//
// Reading is done by libyaml's event parser (the reference C parser, fuzzed for years), which
// takes linear time and memory on any input; the tree is built here with an explicit stack.
// yaml-cpp 0.7, used before, looped forever on several short inputs (found by
// tests/fuzz/yaml_spec_fuzzer). What a job spec does not need is refused with a clear error
// rather than half-supported: aliases (*name, which can also multiply a small text into a huge
// tree), and nesting deeper than kMaxYamlDepth. Anchors and tags are read past.
#ifndef MT_COMMON_SPEC_YAML_TREE_H_
#define MT_COMMON_SPEC_YAML_TREE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt::spec {

inline constexpr int kMaxYamlDepth = 64;

struct YamlNode {
  // kNull: an empty value, or a plain ~ / null / Null / NULL (YAML's null); a quoted "" or
  // 'null' is a kScalar.
  enum class Kind { kNull, kScalar, kMap, kList };
  Kind kind = Kind::kNull;
  std::string text;                                    // a kScalar's text
  int line = 0;                                        // 1-based line where the node starts
  std::vector<std::pair<YamlNode, YamlNode>> entries;  // a kMap's keys and values, in order
  std::vector<YamlNode> items;                         // a kList's items

  bool IsNull() const { return kind == Kind::kNull; }
  bool IsScalar() const { return kind == Kind::kScalar; }
  bool IsMap() const { return kind == Kind::kMap; }
  bool IsList() const { return kind == Kind::kList; }
};

// Every document of the text, in order (none for an empty text or one of comments only).
// Errors: "YAML syntax error at line L, column C: <what libyaml found>", or the unsupported
// feature with its line.
absl::StatusOr<std::vector<YamlNode>> ParseYamlDocuments(absl::string_view text);

}  // namespace mt::spec

#endif  // MT_COMMON_SPEC_YAML_TREE_H_
