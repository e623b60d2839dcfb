#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

// A listener that accepts and at once closes every connection: each of a channel's connection
// attempts fails, and it backs off before the next. Returns when the attempts came.
std::vector<absl::Time> ConnectionAttempts(absl::Duration for_how_long) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto channel = MakeChannel(absl::StrCat("127.0.0.1:", ntohs(addr.sin_port)), "");
  std::vector<absl::Time> attempts;
  const absl::Time end = absl::Now() + for_how_long;
  while (absl::Now() < end) {
    (void)channel->GetState(/*try_to_connect=*/true);  // a caller keeps asking
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) == 1) {
      const int conn = ::accept(fd, nullptr, nullptr);
      if (conn >= 0) {
        attempts.push_back(absl::Now());
        ::close(conn);
      }
    }
  }
  ::close(fd);
  return attempts;
}

// Before: gRPC's default backoff (1 s growing by 1.6 to 120 s) left 2 s, 3 s, 4 s... between
// attempts, so a worker whose coordinator came back stayed away for as long again.
TEST(Channel, ReconnectsWithinItsBoundedBackoff) {
  const std::vector<absl::Time> attempts = ConnectionAttempts(absl::Seconds(7));
  ASSERT_GE(attempts.size(), 5u);
  absl::Duration longest;
  for (size_t i = 1; i < attempts.size(); ++i) {
    longest = std::max(longest, attempts[i] - attempts[i - 1]);
  }
  // The bound plus gRPC's jitter (20 %) and a margin for a loaded machine.
  EXPECT_LT(longest, absl::Milliseconds(kMaxReconnectBackoffMs * 1.6))
      << attempts.size() << " attempts";
}

}  // namespace
}  // namespace mt::rpc
