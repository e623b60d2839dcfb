// Status propagation macros. Abseil 20220623 ships none, so these are ours (DESIGN.md §2).
//
//   MT_RETURN_IF_ERROR(DoThing());
//   MT_ASSIGN_OR_RETURN(auto file, OpenFile(path));
//   MT_ASSIGN_OR_RETURN(std::unique_ptr<Foo> foo, Foo::Create(cfg));
#ifndef MT_COMMON_BASE_STATUS_MACROS_H_
#define MT_COMMON_BASE_STATUS_MACROS_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#define MT_STATUS_CONCAT_INNER_(a, b) a##b
#define MT_STATUS_CONCAT_(a, b) MT_STATUS_CONCAT_INNER_(a, b)

#define MT_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status mt_status_ = (expr);      \
    if (!mt_status_.ok()) return mt_status_; \
  } while (false)

#define MT_ASSIGN_OR_RETURN(lhs, expr) \
  MT_ASSIGN_OR_RETURN_IMPL_(MT_STATUS_CONCAT_(mt_statusor_, __LINE__), lhs, expr)

#define MT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)     \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace mt {

// Prefixes a status message with context, keeping its code: "reading x.idx: <message>".
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), std::string(context) + ": " + std::string(status.message()));
}

}  // namespace mt

#endif  // MT_COMMON_BASE_STATUS_MACROS_H_
