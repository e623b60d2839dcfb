// GoogleTest matchers for absl::Status / absl::StatusOr (Abseil 20220623 has none).
//
//   EXPECT_THAT(Parse(x), IsOk());
//   EXPECT_THAT(Parse(y), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--lr")));
//   MT_ASSERT_OK_AND_ASSIGN(auto spec, Parse(z));
#ifndef MT_COMMON_BASE_STATUS_MATCHERS_H_
#define MT_COMMON_BASE_STATUS_MATCHERS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::testing {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = ::mt::testing::GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + ::testing::PrintToString(code) + " and a matching message") {
  const absl::Status& s = ::mt::testing::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(s.message()), result_listener);
}

MATCHER_P(StatusIs, code, "has code " + ::testing::PrintToString(code)) {
  const absl::Status& s = ::mt::testing::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

}  // namespace mt::testing

#define MT_ASSERT_OK(expr) ASSERT_THAT((expr), ::mt::testing::IsOk())
#define MT_EXPECT_OK(expr) EXPECT_THAT((expr), ::mt::testing::IsOk())
#define MT_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  MT_ASSERT_OK_AND_ASSIGN_IMPL_(MT_STATUS_CONCAT_(mt_assert_statusor_, __LINE__), lhs, expr)
#define MT_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  ASSERT_TRUE(statusor.ok()) << statusor.status();         \
  lhs = std::move(statusor).value()

#endif  // MT_COMMON_BASE_STATUS_MATCHERS_H_
