#include "common/base/status_macros.h"

#include <memory>
#include <string>

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"

namespace mt {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  MT_ASSIGN_OR_RETURN(int half, Half(x));
  MT_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckQuarter(int x) {
  MT_RETURN_IF_ERROR(Quarter(x).status());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> MakeBox(int v) { return std::make_unique<int>(v); }

TEST(StatusMacros, AssignOrReturnPropagatesTheFirstError) {
  EXPECT_EQ(*Quarter(12), 3);
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument, "odd: 3"));
  EXPECT_THAT(Quarter(5), StatusIs(absl::StatusCode::kInvalidArgument, "odd: 5"));
}

TEST(StatusMacros, ReturnIfErrorPassesOkThrough) {
  EXPECT_THAT(CheckQuarter(8), IsOk());
  EXPECT_THAT(CheckQuarter(2), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("odd: 1")));
}

TEST(StatusMacros, AssignOrReturnMovesOnlyTypes) {
  MT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<int> box, MakeBox(7));
  EXPECT_EQ(*box, 7);
}

TEST(StatusMacros, AnnotateKeepsTheCode) {
  absl::Status s = Annotate(absl::NotFoundError("no such file"), "reading a.idx");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound, "reading a.idx: no such file"));
  EXPECT_THAT(Annotate(absl::OkStatus(), "x"), IsOk());
}

}  // namespace
}  // namespace mt
