#include "common/tokenizer/json_lite.h"

#include <algorithm>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/unicode_classes.h"

namespace mt::tokenizer {
namespace {

constexpr int kMaxDepth = 128;

class Parser {
 public:
  explicit Parser(absl::string_view text) : s_(text) {}

  absl::Status Error(absl::string_view what) const {
    const size_t at = std::min(pos_, s_.size());
    const int64_t line = 1 + std::count(s_.begin(), s_.begin() + at, '\n');
    return absl::InvalidArgumentError(
        absl::StrCat("JSON error at byte ", at, " (line ", line, "): ", what));
  }

  void SkipWs() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool AtEnd() const { return pos_ >= s_.size(); }
  char Peek() const { return AtEnd() ? '\0' : s_[pos_]; }

  absl::Status Expect(char c) {
    SkipWs();
    if (Peek() != c) {
      return Error(AtEnd() ? absl::StrCat("expected '", std::string(1, c), "', got end of input")
                           : absl::StrCat("expected '", std::string(1, c), "'"));
    }
    ++pos_;
    return absl::OkStatus();
  }

  absl::StatusOr<uint32_t> Hex4() {
    if (s_.size() - pos_ < 4) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_ + i];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= h - '0';
      } else if (h >= 'a' && h <= 'f') {
        v |= h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        v |= h - 'A' + 10;
      } else {
        return Error("bad hex digit in \\u escape");
      }
    }
    pos_ += 4;
    return v;
  }

  // Parses a string at pos_ (after whitespace); appends its decoded bytes to *out if non-null.
  absl::Status String(std::string* out) {
    MT_RETURN_IF_ERROR(Expect('"'));
    while (true) {
      // Copy the plain run in one go.
      size_t run = pos_;
      while (run < s_.size() && s_[run] != '"' && s_[run] != '\\' &&
             static_cast<unsigned char>(s_[run]) >= 0x20) {
        ++run;
      }
      if (out != nullptr) out->append(s_.data() + pos_, run - pos_);
      pos_ = run;
      if (AtEnd()) return Error("unterminated string");
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (c != '\\') return Error("raw control character in string");
      ++pos_;
      if (AtEnd()) return Error("unterminated escape");
      const char e = s_[pos_++];
      char simple = 0;
      switch (e) {
        case '"':
          simple = '"';
          break;
        case '\\':
          simple = '\\';
          break;
        case '/':
          simple = '/';
          break;
        case 'b':
          simple = '\b';
          break;
        case 'f':
          simple = '\f';
          break;
        case 'n':
          simple = '\n';
          break;
        case 'r':
          simple = '\r';
          break;
        case 't':
          simple = '\t';
          break;
        case 'u': {
          MT_ASSIGN_OR_RETURN(uint32_t cp, Hex4());
          if (cp >= 0xD800 && cp <= 0xDBFF && s_.size() - pos_ >= 6 && s_[pos_] == '\\' &&
              s_[pos_ + 1] == 'u') {
            const size_t save = pos_;
            pos_ += 2;
            MT_ASSIGN_OR_RETURN(uint32_t lo, Hex4());
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              pos_ = save;  // the second escape stands on its own
            }
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
          if (out != nullptr) {
            char buf[4];
            out->append(buf, EncodeUtf8(cp, buf));
          }
          continue;
        }
        default:
          return Error(absl::StrCat("bad escape '\\", std::string(1, e), "'"));
      }
      if (out != nullptr) out->push_back(simple);
    }
  }

  // Parses an integer (no fraction or exponent) that fits in int64.
  absl::StatusOr<int64_t> Integer() {
    SkipWs();
    const size_t start = pos_;
    bool neg = false;
    if (Peek() == '-') {
      neg = true;
      ++pos_;
    }
    if (AtEnd() || Peek() < '0' || Peek() > '9') return Error("expected an integer");
    if (Peek() == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9') {
      return Error("leading zero in number");
    }
    uint64_t v = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      if (v > (uint64_t{1} << 62)) return Error("integer out of range");
      v = v * 10 + (Peek() - '0');
      ++pos_;
    }
    if (Peek() == '.' || Peek() == 'e' || Peek() == 'E') {
      pos_ = start;
      return Error("expected an integer, got a fraction or exponent");
    }
    if (v > (uint64_t{1} << 62)) return Error("integer out of range");
    return neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  }

  absl::Status Number() {
    SkipWs();
    if (Peek() == '-') ++pos_;
    auto digits = [this]() {
      const size_t start = pos_;
      while (!AtEnd() && Peek() >= '0' && Peek() <= '9') ++pos_;
      return pos_ > start;
    };
    if (!digits()) return Error("bad number");
    if (Peek() == '.') {
      ++pos_;
      if (!digits()) return Error("bad number");
    }
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (!digits()) return Error("bad number");
    }
    return absl::OkStatus();
  }

  absl::Status Literal(absl::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return Error("unexpected character");
    pos_ += word.size();
    return absl::OkStatus();
  }

  // Skips any value. *is_string tells whether it was a string, decoded into *str if non-null.
  absl::Status Value(int depth, std::string* str, bool* is_string) {
    if (depth > kMaxDepth) return Error("nesting too deep");
    SkipWs();
    if (is_string != nullptr) *is_string = false;
    switch (Peek()) {
      case '"':
        if (is_string != nullptr) *is_string = true;
        return String(str);
      case '{': {
        ++pos_;
        SkipWs();
        if (Peek() == '}') {
          ++pos_;
          return absl::OkStatus();
        }
        while (true) {
          MT_RETURN_IF_ERROR(String(nullptr));
          MT_RETURN_IF_ERROR(Expect(':'));
          MT_RETURN_IF_ERROR(Value(depth + 1, nullptr, nullptr));
          SkipWs();
          if (Peek() == ',') {
            ++pos_;
            continue;
          }
          return Expect('}');
        }
      }
      case '[': {
        ++pos_;
        SkipWs();
        if (Peek() == ']') {
          ++pos_;
          return absl::OkStatus();
        }
        while (true) {
          MT_RETURN_IF_ERROR(Value(depth + 1, nullptr, nullptr));
          SkipWs();
          if (Peek() == ',') {
            ++pos_;
            continue;
          }
          return Expect(']');
        }
      }
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      case '\0':
        if (AtEnd()) return Error("expected a value, got end of input");
        return Error("unexpected character");
      default:
        return Number();
    }
  }

  // Walks the members of a top-level object, calling member(key) with pos_ at the value; the
  // callback must consume the value. Checks that nothing but whitespace follows.
  template <typename F>
  absl::Status Object(F&& member) {
    MT_RETURN_IF_ERROR(Expect('{'));
    SkipWs();
    if (Peek() == '}') {
      ++pos_;
    } else {
      std::string key;
      while (true) {
        key.clear();
        MT_RETURN_IF_ERROR(String(&key));
        MT_RETURN_IF_ERROR(Expect(':'));
        MT_RETURN_IF_ERROR(member(key));
        SkipWs();
        if (Peek() == ',') {
          ++pos_;
          continue;
        }
        MT_RETURN_IF_ERROR(Expect('}'));
        break;
      }
    }
    SkipWs();
    if (!AtEnd()) return Error("trailing characters after the object");
    return absl::OkStatus();
  }

 private:
  absl::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> ParseJsonStringToIntObject(
    absl::string_view json) {
  std::vector<std::pair<std::string, int64_t>> out;
  Parser parser(json);
  MT_RETURN_IF_ERROR(parser.Object([&](const std::string& key) -> absl::Status {
    absl::StatusOr<int64_t> v = parser.Integer();
    if (!v.ok()) return v.status();
    out.emplace_back(key, *v);
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::string> ExtractJsonStringField(absl::string_view json, absl::string_view key) {
  Parser parser(json);
  std::optional<std::string> found;
  bool wrong_type = false;
  std::string value;
  MT_RETURN_IF_ERROR(parser.Object([&](const std::string& k) -> absl::Status {
    if (k != key) return parser.Value(1, nullptr, nullptr);
    value.clear();
    bool is_string = false;
    MT_RETURN_IF_ERROR(parser.Value(1, &value, &is_string));
    wrong_type = !is_string;
    if (is_string) found = value;
    return absl::OkStatus();
  }));
  if (wrong_type) {
    return absl::InvalidArgumentError(absl::StrCat("field \"", key, "\" is not a string"));
  }
  if (!found.has_value()) {
    return absl::NotFoundError(absl::StrCat("no field \"", key, "\" in the JSON object"));
  }
  return *std::move(found);
}

}  // namespace mt::tokenizer
