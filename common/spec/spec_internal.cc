#include "common/spec/spec_internal.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace mt::spec::internal {
namespace {

using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The enum's value prefix by protobuf style: Precision -> "PRECISION_".
std::string EnumValuePrefix(const EnumDescriptor* type) {
  std::string out;
  const std::string& name = type->name();
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (i > 0 && absl::ascii_isupper(static_cast<unsigned char>(c)) &&
        !absl::ascii_isupper(static_cast<unsigned char>(name[i - 1]))) {
      out.push_back('_');
    }
    out.push_back(absl::ascii_toupper(static_cast<unsigned char>(c)));
  }
  out.push_back('_');
  return out;
}

// Upper-case with '-' as '_', for comparing enum spellings.
std::string CanonicalEnumText(absl::string_view text) {
  std::string out = absl::AsciiStrToUpper(text);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

}  // namespace

absl::StatusOr<int64_t> ParseInt(absl::string_view text, int64_t min, int64_t max) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  int64_t value = 0;
  if (!absl::SimpleAtoi(t, &value)) {
    absl::string_view digits = t;
    absl::ConsumePrefix(&digits, "-") || absl::ConsumePrefix(&digits, "+");
    if (AllDigits(digits)) {
      return Invalid(absl::StrCat(t, " is out of range (", min, "..", max, ")"));
    }
    return Invalid(absl::StrCat("expected an integer, got ", Quote(text)));
  }
  if (value < min || value > max) {
    return Invalid(absl::StrCat(value, " is out of range (", min, "..", max, ")"));
  }
  return value;
}

absl::StatusOr<uint64_t> ParseUint64(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  uint64_t value = 0;
  if (absl::StartsWith(t, "-") || !absl::SimpleAtoi(t, &value)) {
    absl::string_view digits = t;
    absl::ConsumePrefix(&digits, "-") || absl::ConsumePrefix(&digits, "+");
    if (AllDigits(digits)) {
      return Invalid(
          absl::StrCat(t, " is out of range (0..", std::numeric_limits<uint64_t>::max(), ")"));
    }
    return Invalid(absl::StrCat("expected a non-negative integer, got ", Quote(text)));
  }
  return value;
}

absl::StatusOr<double> ParseDouble(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  double value = 0;
  // SimpleAtod also reads "inf", "nan" and hex floats; a spec holds plain finite numbers.
  const bool plain =
      !t.empty() && t.find_first_not_of("0123456789+-.eE") == absl::string_view::npos;
  if (!plain || !absl::SimpleAtod(t, &value)) {
    return Invalid(absl::StrCat("expected a number, got ", Quote(text)));
  }
  if (!std::isfinite(value)) {
    return Invalid(absl::StrCat(t, " is out of range for a number"));
  }
  return value;
}

absl::StatusOr<bool> ParseBool(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "true" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "no" || t == "off") return false;
  return Invalid(absl::StrCat("expected true or false, got ", Quote(text)));
}

std::string EnumShortName(const EnumValueDescriptor* value) {
  absl::string_view name = value->name();
  const std::string prefix = EnumValuePrefix(value->type());
  absl::ConsumePrefix(&name, prefix);
  return absl::AsciiStrToLower(name);
}

absl::StatusOr<const EnumValueDescriptor*> ParseEnum(const EnumDescriptor* type,
                                                     absl::string_view text) {
  std::string want = CanonicalEnumText(absl::StripAsciiWhitespace(text));
  // Megatron's tokenizer class name.
  if (type == mt::v1::TokenizerType_descriptor() && want == "GPT2BPETOKENIZER") want = "GPT2_BPE";
  const std::string prefix = EnumValuePrefix(type);
  std::vector<std::string> names;
  for (int i = 0; i < type->value_count(); ++i) {
    const EnumValueDescriptor* v = type->value(i);
    if (want == v->name() || absl::StrCat(prefix, want) == v->name()) return v;
    if (v->number() != 0) names.push_back(EnumShortName(v));
  }
  return Invalid(
      absl::StrCat("expected one of ", absl::StrJoin(names, ", "), ", got ", Quote(text)));
}

absl::Status SetScalarFromText(Message* message, const FieldDescriptor* field,
                               absl::string_view text) {
  const Reflection* r = message->GetReflection();
  const bool rep = field->is_repeated();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      auto v =
          ParseInt(text, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
      if (!v.ok()) return v.status();
      const auto x = static_cast<int32_t>(*v);
      rep ? r->AddInt32(message, field, x) : r->SetInt32(message, field, x);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      auto v =
          ParseInt(text, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
      if (!v.ok()) return v.status();
      rep ? r->AddInt64(message, field, *v) : r->SetInt64(message, field, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      auto v = ParseInt(text, 0, std::numeric_limits<uint32_t>::max());
      if (!v.ok()) return v.status();
      const auto x = static_cast<uint32_t>(*v);
      rep ? r->AddUInt32(message, field, x) : r->SetUInt32(message, field, x);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      auto v = ParseUint64(text);
      if (!v.ok()) return v.status();
      rep ? r->AddUInt64(message, field, *v) : r->SetUInt64(message, field, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      auto v = ParseDouble(text);
      if (!v.ok()) return v.status();
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) {
        const auto x = static_cast<float>(*v);
        rep ? r->AddFloat(message, field, x) : r->SetFloat(message, field, x);
      } else {
        rep ? r->AddDouble(message, field, *v) : r->SetDouble(message, field, *v);
      }
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      auto v = ParseBool(text);
      if (!v.ok()) return v.status();
      rep ? r->AddBool(message, field, *v) : r->SetBool(message, field, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      auto v = ParseEnum(field->enum_type(), text);
      if (!v.ok()) return v.status();
      rep ? r->AddEnum(message, field, *v) : r->SetEnum(message, field, *v);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      if (!IsValidUtf8(text)) {
        return Invalid(absl::StrCat("expected UTF-8 text, got ", Quote(text)));
      }
      const std::string s(text);
      rep ? r->AddString(message, field, s) : r->SetString(message, field, s);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return absl::InternalError(absl::StrCat(field->full_name(), " is not a scalar field"));
}

std::string FormatDouble(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? ".nan" : (value > 0 ? ".inf" : "-.inf");
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  // %g switches to an exponent once the exponent reaches the precision ("1e+01" for 10); plain
  // digits read better for magnitudes up to 1e16.
  if (std::strchr(buf, 'e') != nullptr) {
    const int exponent = static_cast<int>(std::floor(std::log10(std::fabs(value))));
    if (exponent >= 0 && exponent < 16)
      std::snprintf(buf, sizeof(buf), "%.*g", exponent + 1, value);
  }
  std::string out = buf;
  if (out.find_first_of(".e") == std::string::npos) {
    out += ".0";
  } else if (const size_t e = out.find('e');
             e != std::string::npos && out.find('.') == std::string::npos) {
    out.insert(e, ".0");
  }
  return out;
}

std::string ScalarText(const Message& message, const FieldDescriptor* field, int index) {
  const Reflection* r = message.GetReflection();
  const bool rep = field->is_repeated();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return absl::StrCat(rep ? r->GetRepeatedInt32(message, field, index)
                              : r->GetInt32(message, field));
    case FieldDescriptor::CPPTYPE_INT64:
      return absl::StrCat(rep ? r->GetRepeatedInt64(message, field, index)
                              : r->GetInt64(message, field));
    case FieldDescriptor::CPPTYPE_UINT32:
      return absl::StrCat(rep ? r->GetRepeatedUInt32(message, field, index)
                              : r->GetUInt32(message, field));
    case FieldDescriptor::CPPTYPE_UINT64:
      return absl::StrCat(rep ? r->GetRepeatedUInt64(message, field, index)
                              : r->GetUInt64(message, field));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return FormatDouble(rep ? r->GetRepeatedDouble(message, field, index)
                              : r->GetDouble(message, field));
    case FieldDescriptor::CPPTYPE_FLOAT:
      return FormatDouble(rep ? r->GetRepeatedFloat(message, field, index)
                              : r->GetFloat(message, field));
    case FieldDescriptor::CPPTYPE_BOOL:
      return (rep ? r->GetRepeatedBool(message, field, index) : r->GetBool(message, field))
                 ? "true"
                 : "false";
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int number =
          rep ? r->GetRepeatedEnumValue(message, field, index) : r->GetEnumValue(message, field);
      const EnumValueDescriptor* v = field->enum_type()->FindValueByNumber(number);
      // An unknown number (from a newer peer) has no name; it cannot round-trip through text.
      return v != nullptr ? EnumShortName(v) : absl::StrCat(number);
    }
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? r->GetRepeatedString(message, field, index) : r->GetString(message, field);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return "";
}

std::string Quote(absl::string_view text) {
  constexpr size_t kMax = 80;
  if (text.size() > kMax) {
    return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMax)), "...\"");
  }
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string NearestName(absl::string_view name, const std::vector<std::string>& candidates) {
  const int budget = std::max(2, static_cast<int>(name.size()) / 3);
  std::string best;
  int best_distance = std::numeric_limits<int>::max();
  for (const std::string& c : candidates) {
    const int d = EditDistance(name, c);
    const bool prefix =
        name.size() >= 3 && (absl::StartsWith(c, name) || absl::StartsWith(name, c));
    if ((d <= budget || prefix) && d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    int extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;
    for (int k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

std::string FindShellMetacharacters(absl::string_view text) {
  static constexpr absl::string_view kSequences[] = {"$(", "${", "`", ";",  "|",
                                                     "&&", ">",  "<", "\n", "\r"};
  size_t first = absl::string_view::npos;
  absl::string_view found;
  for (absl::string_view seq : kSequences) {
    const size_t at = text.find(seq);
    if (at < first) {
      first = at;
      found = seq;
    }
  }
  return std::string(found);
}

absl::StatusOr<std::vector<double>> ParseSplit(absl::string_view text) {
  const auto bad = [&] {
    return Invalid(absl::StrCat(
        "expected one to three comma-separated non-negative numbers with a positive sum "
        "(train,valid,test such as 969,30,1), got ",
        Quote(text)));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
  if (parts.empty() || parts.size() > 3) return bad();
  std::vector<double> out;
  double sum = 0;
  for (absl::string_view p : parts) {
    auto v = ParseDouble(p);
    if (!v.ok() || *v < 0) return bad();
    out.push_back(*v);
    sum += *v;
  }
  if (!(sum > 0)) return bad();
  return out;
}

absl::StatusOr<std::vector<mt::v1::DataPath>> ParseFlatDataPaths(
    const std::vector<std::string>& items, const std::function<std::string(int)>& where) {
  std::vector<mt::v1::DataPath> out;
  if (items.empty()) return Invalid(absl::StrCat(where(-1), ": no dataset prefix given"));
  if (items.size() == 1) {
    out.emplace_back();
    out.back().set_weight(1.0);
    out.back().set_prefix(items[0]);
    return out;
  }
  if (items.size() % 2 != 0) {
    // An odd list is either prefixes without weights or a missing weight/prefix.
    return Invalid(absl::StrCat(where(-1),
                                ": expected one prefix or weight-prefix pairs "
                                "(w1 p1 w2 p2 ...), got ",
                                items.size(), " values"));
  }
  for (size_t i = 0; i < items.size(); i += 2) {
    auto w = ParseDouble(items[i]);
    if (!w.ok()) {
      return Invalid(absl::StrCat(where(static_cast<int>(i)),
                                  ": expected a blend weight (a number) before each prefix, got ",
                                  Quote(items[i]),
                                  "; write weight-prefix pairs (w1 p1 w2 p2 ...)"));
    }
    out.emplace_back();
    out.back().set_weight(*w);
    out.back().set_prefix(items[i + 1]);
  }
  return out;
}

absl::StatusOr<std::pair<Message*, const FieldDescriptor*>> MutableFieldByPath(
    Message* root, absl::string_view path) {
  Message* message = root;
  std::vector<absl::string_view> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(std::string(parts[i]));
    if (field == nullptr) {
      return absl::InternalError(absl::StrCat("no field ", path, " in ", root->GetTypeName()));
    }
    if (i + 1 == parts.size()) return std::make_pair(message, field);
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || field->is_repeated()) {
      return absl::InternalError(absl::StrCat(path, ": ", parts[i], " is not a message field"));
    }
    message = message->GetReflection()->MutableMessage(message, field);
  }
  return absl::InternalError(absl::StrCat("empty field path in ", root->GetTypeName()));
}

}  // namespace mt::spec::internal
