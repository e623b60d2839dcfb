#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "common/rpc/auth.h"
#include "common/rpc/dial.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/tls.h"
#include "gtest/gtest.h"
#include "mt/v1/worker_service.grpc.pb.h"

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

TEST(Auth, TokenTableWithRolesAndNames) {
  const std::string path = ::testing::TempDir() + "/roles";
  MT_ASSERT_OK(WriteFileAtomically(path,
                                   "# bare = admin\n0123456789abcdef0123\n"
                                   "submit alice aaaaaaaaaaaaaaaaaaaa\n"
                                   "read bbbbbbbbbbbbbbbbbbbb\n"
                                   "worker  node-7   cccccccccccccccccccc  \n"));
  MT_ASSERT_OK_AND_ASSIGN(auto table, ReadTokenTable(path));
  ASSERT_EQ(table.size(), 4u);
  EXPECT_EQ(table[0].role, Role::kAdmin);
  EXPECT_EQ(table[0].name, "admin");
  EXPECT_EQ(table[1].role, Role::kSubmit);
  EXPECT_EQ(table[1].name, "alice");
  EXPECT_EQ(table[1].token, "aaaaaaaaaaaaaaaaaaaa");
  EXPECT_EQ(table[2].role, Role::kRead);
  EXPECT_EQ(table[2].name, "read");
  EXPECT_EQ(table[3].role, Role::kWorker);
  EXPECT_EQ(table[3].name, "node-7");
  EXPECT_EQ(table[3].token, "cccccccccccccccccccc");
  // What clients send: the first token, whatever the line's form.
  MT_ASSERT_OK_AND_ASSIGN(auto tokens, ReadTokenFile(path));
  EXPECT_EQ(tokens.front(), "0123456789abcdef0123");
}

TEST(Auth, TokenTableErrorsNameTheLine) {
  const std::string path = ::testing::TempDir() + "/bad_roles";
  MT_ASSERT_OK(WriteFileAtomically(path, "# x\nroot aaaaaaaaaaaaaaaaaaaa\n"));
  EXPECT_THAT(ReadTokenTable(path),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(":2: unknown role 'root'")));
  MT_ASSERT_OK(WriteFileAtomically(path, "submit a b aaaaaaaaaaaaaaaaaaaa\n"));
  EXPECT_THAT(ReadTokenTable(path),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(":1: expected 'ROLE NAME")));
  MT_ASSERT_OK(WriteFileAtomically(path, "submit al/ice aaaaaaaaaaaaaaaaaaaa\n"));
  EXPECT_THAT(ReadTokenTable(path),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("may hold letters")));
  MT_ASSERT_OK(
      WriteFileAtomically(path, "read aaaaaaaaaaaaaaaaaaaa\nsubmit aaaaaaaaaaaaaaaaaaaa\n"));
  EXPECT_THAT(ReadTokenTable(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr(":2: this token is listed twice")));
  MT_ASSERT_OK(WriteFileAtomically(path, "read short\n"));
  EXPECT_THAT(ReadTokenTable(path), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr(":1: a token must be 16..512")));
}

TEST(Tls, FlagCombinations) {
  EXPECT_THAT(ValidateServerTls({"c.pem", "", ""}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls-key")));
  EXPECT_THAT(ValidateServerTls({"", "", "ca.pem"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls-client-ca needs")));
  MT_EXPECT_OK(ValidateServerTls({"c.pem", "k.pem", "ca.pem"}));
  EXPECT_THAT(ValidateClientTls({"", "c.pem", "k.pem"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls-cert needs --tls-ca")));
  MT_EXPECT_OK(ValidateClientTls({"ca.pem", "", ""}));
  const std::string not_pem = ::testing::TempDir() + "/not.pem";
  MT_ASSERT_OK(WriteFileAtomically(not_pem, "hello"));
  EXPECT_THAT(MakeChannelCredentials({not_pem, "", ""}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls-ca")));
  EXPECT_THAT(MakeServerCredentials({"/no/such.pem", "/no/such.key", ""}).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("--tls-cert")));
}

TEST(Tls, TokensStayOffPlaintextBeyondLoopback) {
  EXPECT_THAT(CheckTokenTransport("10.0.0.1:7070", true, false, false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls-ca")));
  MT_EXPECT_OK(CheckTokenTransport("10.0.0.1:7070", true, true, false));
  MT_EXPECT_OK(CheckTokenTransport("10.0.0.1:7070", true, false, true));
  MT_EXPECT_OK(CheckTokenTransport("127.0.0.1:7070", true, false, false));
  MT_EXPECT_OK(CheckTokenTransport("10.0.0.1:7070", false, false, false));
  // Dial applies the rule before any connection.
  const std::string tokens = ::testing::TempDir() + "/dial_tokens";
  MT_ASSERT_OK(WriteFileAtomically(tokens, "submit bob aaaaaaaaaaaaaaaaaaaa\n"));
  EXPECT_THAT(Dial({"10.0.0.1:7070", tokens, {}, false}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("refusing")));
  MT_EXPECT_OK(Dial({"127.0.0.1:7070", tokens, {}, false}).status());
}

TEST(Tls, EnvironmentRoundTrip) {
  const ClientTlsFiles files{"/a/ca.pem", "/a/c.pem", "/a/k.pem"};
  EXPECT_THAT(ClientTlsEnvironment(files),
              ElementsAre("MT_TLS_CA=/a/ca.pem", "MT_TLS_CERT=/a/c.pem", "MT_TLS_KEY=/a/k.pem"));
  EXPECT_TRUE(ClientTlsEnvironment({}).empty());
}

// A gRPC server on `address` (127.0.0.1:0 picks a port) whose calls are all UNIMPLEMENTED.
std::unique_ptr<grpc::Server> Serve(const std::string& address, int* port) {
  static auto* const unimplemented = new mt::v1::WorkerService::Service();
  grpc::ServerBuilder builder;
  rpc::AllowKeepalivePings(&builder);
  builder.RegisterService(unimplemented);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  return builder.BuildAndStart();
}

// Before: gRPC's default backoff (1 s growing by 1.6, with 20 % jitter, to 120 s) had the
// channel try again 1 to 11 s after a server that had been away for 20 s was back, so a
// worker daemon came back as late (and later still after longer outages).
TEST(Channel, ReconnectsWithinItsBoundedBackoffAfterALongOutage) {
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve("127.0.0.1:0", &port);
  ASSERT_NE(server, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  auto channel = MakeChannel(address, "");
  ASSERT_TRUE(
      channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5)));
  server->Shutdown();
  server.reset();
  // Away for 20 s, while a caller keeps asking (as the daemon's registration does).
  const absl::Time back = absl::Now() + absl::Seconds(20);
  while (absl::Now() < back) {
    (void)channel->GetState(/*try_to_connect=*/true);
    absl::SleepFor(absl::Milliseconds(50));
  }
  int again = 0;
  server = Serve(address, &again);
  ASSERT_NE(server, nullptr);
  ASSERT_EQ(again, port);
  const absl::Time start = absl::Now();
  while (channel->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_READY &&
         absl::Now() - start < absl::Seconds(15)) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const absl::Duration took = absl::Now() - start;
  // The bound, gRPC's jitter (20 %) and a margin for a loaded machine.
  EXPECT_LT(took, absl::Milliseconds(kMaxReconnectBackoffMs * 2)) << absl::FormatDuration(took);
  std::fprintf(stderr, "connected again %s after the server's return\n",
               absl::FormatDuration(took).c_str());
}

// A TCP relay on 127.0.0.1 to `target_port` that can go silent as a cut link does: after
// Stall() it moves no byte in either direction and closes nothing, so no reset reaches either
// end (what a cable pulled between two hosts looks like to both).
class StallingRelay {
 public:
  explicit StallingRelay(int target_port) : target_port_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = Loopback(0);
    socklen_t len = sizeof(addr);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
        ::listen(listener_, 8) == 0 &&
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
    accept_ = std::thread([this] { Accept(); });
  }
  ~StallingRelay() {
    stop_ = true;
    accept_.join();
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
    ::close(listener_);
  }
  int port() const { return port_; }
  void Stall() { stalled_ = true; }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    return addr;
  }
  void Accept() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      const sockaddr_in addr = Loopback(target_port_);
      (void)::connect(server, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([this, client, server] { Pump(client, server); });
    }
  }
  // Copies bytes both ways until stopped; once stalled, holds both sockets open and idle.
  void Pump(int a, int b) {
    char buf[16384];
    while (!stop_) {
      if (stalled_) {
        ::usleep(20000);
        continue;
      }
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (::poll(p, 2, 20) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if ((p[i].revents & (POLLIN | POLLHUP)) == 0) continue;
        const ssize_t n = ::read(p[i].fd, buf, sizeof(buf));
        if (n <= 0) return;
        if (::write(i == 0 ? b : a, buf, n) != n) return;
      }
    }
  }

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> stalled_{false};
  // Only the accept thread adds to these; the destructor reads them once it has joined it.
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
  std::thread accept_;
};

// Before (no keepalive pings): a connection whose network went silent stayed READY for as long
// as the outage lasted, and calls queued behind TCP's retransmission backoff, which a worker
// daemon paid for with missed heartbeats after the network came back (auth.h).
TEST(Channel, ClosesAConnectionWhoseNetworkWentSilentWithinItsKeepalive) {
  int port = 0;
  std::unique_ptr<grpc::Server> server = Serve("127.0.0.1:0", &port);
  ASSERT_NE(server, nullptr);
  StallingRelay relay(port);
  ASSERT_NE(relay.port(), 0);
  auto channel = MakeChannel(absl::StrCat("127.0.0.1:", relay.port()), "");
  ASSERT_TRUE(
      channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5)));
  // Pings flow while the relay moves bytes: the connection stays up past a keepalive period.
  absl::SleepFor(absl::Milliseconds(2 * kKeepaliveTimeMs + kKeepaliveTimeoutMs));
  ASSERT_EQ(channel->GetState(/*try_to_connect=*/false), GRPC_CHANNEL_READY);
  relay.Stall();
  const absl::Time start = absl::Now();
  while (channel->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY &&
         absl::Now() - start < absl::Seconds(15)) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const absl::Duration took = absl::Now() - start;
  // One ping period, its answer's timeout, and a margin for a loaded machine.
  EXPECT_LT(took, absl::Milliseconds(kKeepaliveTimeMs + kKeepaliveTimeoutMs + 2000))
      << absl::FormatDuration(took);
  std::fprintf(stderr, "the silent connection was closed %s after the network stalled\n",
               absl::FormatDuration(took).c_str());
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace mt::rpc
