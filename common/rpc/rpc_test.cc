#include <string>

#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "common/rpc/auth.h"
#include "common/rpc/grpc_status.h"
#include "gtest/gtest.h"

namespace mt::rpc {
namespace {

using ::mt::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GrpcStatus, EveryCanonicalCodeRoundTrips) {
  for (int code = 0; code <= 16; ++code) {
    absl::Status s(static_cast<absl::StatusCode>(code), code == 0 ? "" : "msg");
    grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("model.hidden_size: x")).error_message(),
            "model.hidden_size: x");
}

TEST(Auth, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:7070"));
  EXPECT_TRUE(IsLoopbackAddress("127.3.2.1:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:7070"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:7070"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:7070"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:7070"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:7070"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.256:1"));
  EXPECT_FALSE(IsLoopbackAddress("myhost:7070"));
}

TEST(Auth, TokenFile) {
  const std::string path = ::testing::TempDir() + "/tokens";
  MT_ASSERT_OK(
      WriteFileAtomically(path, "# ops\n0123456789abcdef0123\n\n  fedcba9876543210xx  \n"));
  MT_ASSERT_OK_AND_ASSIGN(auto tokens, ReadTokenFile(path));
  EXPECT_THAT(tokens, ElementsAre("0123456789abcdef0123", "fedcba9876543210xx"));
  MT_ASSERT_OK(WriteFileAtomically(path, "short\n"));
  EXPECT_THAT(ReadTokenFile(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr(":1: a token must be 16..512")));
  MT_ASSERT_OK(WriteFileAtomically(path, "# nothing\n"));
  EXPECT_THAT(ReadTokenFile(path),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("holds no token")));
}

}  // namespace
}  // namespace mt::rpc
