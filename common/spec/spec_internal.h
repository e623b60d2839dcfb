// Helpers shared by the YAML and Megatron-flag front ends and the validator: scalar parsing with
// user-facing messages, enum names, number formatting, protobuf field lookup by dotted path.
// Not part of the public API of mt_spec. Thread-compatible free functions; no state.
#ifndef MT_COMMON_SPEC_SPEC_INTERNAL_H_
#define MT_COMMON_SPEC_SPEC_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "mt/v1/job_spec.pb.h"

namespace mt::spec::internal {

// Every parse error below carries only the reason ("expected an integer, got \"x\""); callers
// prefix the place (a YAML key path or a flag name).

// A decimal integer in [min, max]. Errors: `expected an integer, got "x"` and
// `3000000000 is out of range (-2147483648..2147483647)`.
absl::StatusOr<int64_t> ParseInt(absl::string_view text, int64_t min, int64_t max);
// A decimal non-negative integer up to UINT64_MAX.
absl::StatusOr<uint64_t> ParseUint64(absl::string_view text);
// A finite decimal number ("1.5e-4", "3", "-0.5"). Error: `expected a number, got "abc"`.
absl::StatusOr<double> ParseDouble(absl::string_view text);
// true/false (also True/TRUE/yes/no/on/off). Error: `expected true or false, got "x"`.
absl::StatusOr<bool> ParseBool(absl::string_view text);

// Short lower-case name of an enum value: PRECISION_BF16 -> "bf16",
// LR_DECAY_STYLE_INVERSE_SQUARE_ROOT -> "inverse_square_root".
std::string EnumShortName(const google::protobuf::EnumValueDescriptor* value);
// Accepts the short name or the full name, in any case, with '-' for '_'. The error lists the
// short names of the values other than *_UNSPECIFIED: `expected one of fp32, fp16, bf16, got
// "fp8"`.
absl::StatusOr<const google::protobuf::EnumValueDescriptor*> ParseEnum(
    const google::protobuf::EnumDescriptor* type, absl::string_view text);

// Parses `text` for a scalar (non-message) field and sets it (appends for a repeated field).
absl::Status SetScalarFromText(google::protobuf::Message* message,
                               const google::protobuf::FieldDescriptor* field,
                               absl::string_view text);

// The YAML/flag text of a scalar field value (index is used for repeated fields): integers in
// decimal, doubles as the shortest text that reads back to the same value, always with a '.'
// so that YAML 1.1 readers see a float ("1.0", "0.00015", "10.0", "1.0e-08"), enums by short
// name, bools as true/false, strings unchanged.
std::string ScalarText(const google::protobuf::Message& message,
                       const google::protobuf::FieldDescriptor* field, int index);
std::string FormatDouble(double value);

// "\"text\"" with C escapes, cut to 80 bytes, for quoting user input in messages.
std::string Quote(absl::string_view text);

// Levenshtein distance.
int EditDistance(absl::string_view a, absl::string_view b);
// The candidate closest to `name`, or "" when none is close: a candidate that starts with
// `name` (or the other way round), or one within max(2, |name|/3) edits.
std::string NearestName(absl::string_view name, const std::vector<std::string>& candidates);

bool IsValidUtf8(absl::string_view text);

// The first shell metacharacter sequence in `text` ("$(", "${", "`", ";", "|", "&&", ">", "<",
// a newline or a carriage return), or "" when none.
std::string FindShellMetacharacters(absl::string_view text);

// "969,30,1": one to three comma-separated non-negative numbers with a positive sum.
absl::StatusOr<std::vector<double>> ParseSplit(absl::string_view text);

// Megatron's flat blend list: ["prefix"] (weight 1) or ["w1", "p1", "w2", "p2", ...].
// `where(i)` names item i in errors.
absl::StatusOr<std::vector<mt::v1::DataPath>> ParseFlatDataPaths(
    const std::vector<std::string>& items, const std::function<std::string(int)>& where);

// Finds a field by a dotted path of field names from `root` ("model.num_layers"), creating the
// parent messages on the way. Fails (kInternal) when the path names no field.
absl::StatusOr<std::pair<google::protobuf::Message*, const google::protobuf::FieldDescriptor*>>
MutableFieldByPath(google::protobuf::Message* root, absl::string_view path);

}  // namespace mt::spec::internal

#endif  // MT_COMMON_SPEC_SPEC_INTERNAL_H_
