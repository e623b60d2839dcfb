// TLS, mutual TLS and roles through the real binaries on loopback: mt-coordinator with
// --tls-cert/--tls-key (and --tls-client-ca), mtctl and mt-worker with --tls-ca, a token file
// with roles. Certificates are made here with openssl (tests/testutil/certs.h).
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "common/rpc/auth.h"
#include "common/rpc/tls.h"
#include "gtest/gtest.h"
#include "tests/testutil/certs.h"
#include "tests/testutil/http.h"
#include "tests/testutil/raw_call.h"
#include "tests/testutil/subprocess.h"

namespace mt {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testutil::CommandResult;
using testutil::RunCommand;
using testutil::Subprocess;

const std::string kBin = std::string(MT_BINARY_DIR) + "/bin/";

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::MakeTempDir("security");
    auto certs = testutil::MakeTestCerts(dir_);
    if (!certs.ok()) GTEST_SKIP() << "openssl cannot make test certificates: " << certs.status();
    certs_ = *certs;
    tokens_ = dir_ + "/tokens";
    ASSERT_THAT(WriteFileAtomically(tokens_,
                                    "admin root-token-0123456789abcdef\n"
                                    "submit alice alice-token-0123456789abcdef\n"
                                    "read viewer-token-0123456789abcdef\n"
                                    "worker node-a worker-token-0123456789abcdef\n"),
                testing::IsOk());
    for (const char* role : {"root", "alice", "viewer", "worker"}) {
      const std::string line = std::string(role) + "-token-0123456789abcdef\n";
      ASSERT_THAT(WriteFileAtomically(TokenFile(role), line), testing::IsOk());
    }
  }

  std::string TokenFile(const std::string& who) { return dir_ + "/" + who + ".token"; }

  void StartCoordinator(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {kBin + "mt-coordinator",
                                     "--listen=127.0.0.1:0",
                                     "--address_file=" + dir_ + "/addr",
                                     "--state_dir=" + dir_ + "/state",
                                     "--auth_token_file=" + tokens_,
                                     "--tls_cert=" + certs_.server_cert,
                                     "--tls_key=" + certs_.server_key,
                                     "--heartbeat_interval=100ms",
                                     "--lost_after=1s",
                                     "--metrics_port=-1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ASSERT_THAT(coordinator_.Start(argv, dir_ + "/coordinator.log"), testing::IsOk());
    auto addr = testutil::WaitForFile(dir_ + "/addr", absl::Seconds(20));
    ASSERT_TRUE(addr.ok()) << addr.status() << "\n" << Log("coordinator.log");
    address_ = *addr;
  }

  CommandResult Mtctl(std::vector<std::string> args) {
    args.insert(args.begin(), kBin + "mtctl");
    auto r = RunCommand(args, absl::Seconds(30), {"MT_COORDINATOR=" + address_});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.value_or(CommandResult{});
  }

  std::string Log(const std::string& name) { return ReadFile(dir_ + "/" + name).value_or(""); }

  std::string dir_, tokens_, address_;
  testutil::TestCerts certs_;
  Subprocess coordinator_;
};

TEST_F(SecurityTest, TlsVerifiesTheServerAndRolesLimitTokens) {
  StartCoordinator({});
  const std::string viewer = "--token_file=" + TokenFile("viewer");
  // Plaintext against a TLS port, or a CA that did not sign the server: unreachable (4).
  CommandResult r = Mtctl({"workers", viewer});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  r = Mtctl({"workers", viewer, "--tls_ca=" + certs_.other_ca});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  r = Mtctl({"workers", viewer, "--tls-ca", certs_.ca, "-o", "json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The same CA from the environment.
  auto env = RunCommand({kBin + "mtctl", "workers", viewer}, absl::Seconds(30),
                        {"MT_COORDINATOR=" + address_, "MT_TLS_CA=" + certs_.ca});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->exit_code, 0) << env->err;

  // A worker over TLS with a worker token registers.
  Subprocess worker;
  ASSERT_THAT(
      worker.Start({kBin + "mt-worker", "--coordinator=" + address_, "--node=nodea", "--gpu=-1",
                    "--token_file=" + TokenFile("worker"), "--tls_ca=" + certs_.ca},
                   dir_ + "/worker.log"),
      testing::IsOk());
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        CommandResult w = Mtctl({"workers", viewer, "--tls_ca=" + certs_.ca, "-o", "json"});
        return w.out.find("\"node\": \"nodea\"") != std::string::npos;
      },
      absl::Seconds(20)))
      << Log("worker.log");

  // Roles: a read token cannot delete checkpoints or cancel (exit 5, PERMISSION_DENIED naming
  // the role), nor import; a submit token passes the role check of a delete (its ownership of
  // the checkpoint's job comes next: here there is no such checkpoint, exit 3) but not that of
  // an import; a worker token cannot use the client service at all; admin passes the role
  // check (and finds no such checkpoint: exit 3).
  r = Mtctl({"checkpoints", "delete", "c-1", viewer, "--tls_ca=" + certs_.ca});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_THAT(r.err, HasSubstr("DeleteCheckpoint needs the submit role"));
  r = Mtctl({"checkpoints", "delete", "c-1", "--token_file=" + TokenFile("alice"),
             "--tls_ca=" + certs_.ca});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  r = Mtctl({"checkpoints", "import", dir_, "--token_file=" + TokenFile("alice"),
             "--tls_ca=" + certs_.ca});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_THAT(r.err, HasSubstr("token 'alice' has role submit"));
  r = Mtctl({"cancel", "job-1", viewer, "--tls_ca=" + certs_.ca});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_THAT(r.err, HasSubstr("CancelJob needs the submit role"));
  r = Mtctl({"workers", "--token_file=" + TokenFile("worker"), "--tls_ca=" + certs_.ca});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_THAT(r.err, HasSubstr("has role worker"));
  r = Mtctl({"checkpoints", "delete", "c-1", "--token_file=" + TokenFile("root"),
             "--tls_ca=" + certs_.ca});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  worker.Signal(SIGTERM);
  EXPECT_TRUE(worker.Wait(absl::Seconds(10)).ok());
}

// Health stays open without a token (over TLS); server reflection follows --reflection: on by
// default on loopback, UNIMPLEMENTED with --reflection=off (it answered anyway before: gRPC's
// reflection library registers itself for every server it is linked into).
TEST_F(SecurityTest, HealthIsOpenAndReflectionFollowsItsFlag) {
  auto credentials = rpc::MakeChannelCredentials({certs_.ca, "", ""});
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  // ServerReflectionRequest{list_services: ""} (field 7).
  const std::string list_services("\x3a\x00", 2);
  const std::string reflection = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
  for (const bool off : {true, false}) {
    SCOPED_TRACE(off ? "--reflection=off" : "default (auto, loopback)");
    StartCoordinator(off ? std::vector<std::string>{"--reflection=off"}
                         : std::vector<std::string>{});
    const auto channel = rpc::MakeChannel(address_, "", *credentials);
    const testutil::RawCallResult health =
        testutil::RawCall(channel, "/grpc.health.v1.Health/Check", "");
    EXPECT_TRUE(health.status.ok()) << health.status.error_message();
    EXPECT_EQ(health.response, std::string("\x08\x01", 2));  // SERVING
    const testutil::RawCallResult listed = testutil::RawCall(channel, reflection, list_services);
    if (off) {
      EXPECT_EQ(listed.status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
          << listed.status.error_message();
    } else {
      EXPECT_TRUE(listed.has_response) << listed.status.error_message();
      EXPECT_NE(listed.response.find("mt.v1.ClientService"), std::string::npos);
    }
    coordinator_.Signal(SIGTERM);
    EXPECT_TRUE(coordinator_.Wait(absl::Seconds(10)).ok());
    ::unlink((dir_ + "/addr").c_str());
  }
}

TEST_F(SecurityTest, MutualTlsRequiresAClientCertificate) {
  StartCoordinator({"--tls_client_ca=" + certs_.ca});
  const std::string root = "--token_file=" + TokenFile("root");
  CommandResult r = Mtctl({"workers", root, "--tls_ca=" + certs_.ca});
  EXPECT_EQ(r.exit_code, 4) << r.err;  // no client certificate: the handshake fails
  r = Mtctl({"workers", root, "--tls_ca=" + certs_.ca, "--tls_cert=" + certs_.client_cert,
             "--tls_key=" + certs_.client_key});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A client certificate without the token is still refused by the token check.
  r = Mtctl({"workers", "--tls_ca=" + certs_.ca, "--tls_cert=" + certs_.client_cert,
             "--tls_key=" + certs_.client_key});
  EXPECT_EQ(r.exit_code, 5) << r.err;
}

TEST_F(SecurityTest, PlaintextOffLoopbackIsRefusedUpFront) {
  // The coordinator: tokens without TLS beyond loopback need an explicit opt-out.
  auto r = RunCommand({kBin + "mt-coordinator", "--listen=0.0.0.0:0", "--state_dir=" + dir_,
                       "--auth_token_file=" + tokens_, "--allowed_root=" + dir_});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("give --tls-cert and --tls-key"));
  // The metrics endpoint answers without a token: off loopback only when asked for.
  r = RunCommand({kBin + "mt-coordinator", "--state_dir=" + dir_, "--metrics_host=0.0.0.0"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("--metrics-public"));
  // mtctl: refuses before dialling (no traffic leaves the machine).
  r = RunCommand({kBin + "mtctl", "workers", "--coordinator=192.0.2.1:7070",
                  "--token_file=" + TokenFile("viewer")});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("refusing to send a bearer token in plaintext"));
}

// The worker's /metrics follows the coordinator's rules (common/metrics/metrics_security.h):
// off loopback only with a token or --metrics-public; with --metrics-token-file every scrape
// needs the bearer token; with --metrics-tls-cert/--metrics-tls-key it speaks HTTPS only.
// Before, a worker served /metrics in clear text to anyone on any interface it bound.
TEST_F(SecurityTest, WorkerMetricsNeedATokenOffLoopbackAndSpeakTls) {
  const std::vector<std::string> base = {kBin + "mt-worker", "--coordinator=127.0.0.1:1",
                                         "--node=nodem", "--gpu=-1"};
  std::vector<std::string> argv = base;
  argv.push_back("--metrics_host=0.0.0.0");
  auto r = RunCommand(argv, absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2) << r->err;
  EXPECT_THAT(r->err, HasSubstr("--metrics-host 0.0.0.0 is not a loopback address"));
  EXPECT_THAT(r->err, HasSubstr("--metrics-token-file"));
  argv = base;
  argv.push_back("--metrics_tls_cert=" + certs_.server_cert);
  r = RunCommand(argv, absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 2) << r->err;
  EXPECT_THAT(r->err, HasSubstr("--metrics-tls-key"));

  const std::string token = "metrics-token-0123456789abcdef";
  ASSERT_THAT(WriteFileAtomically(dir_ + "/metrics.token", token + "\n"), testing::IsOk());
  argv = base;
  argv.insert(
      argv.end(),
      {"--metrics_host=0.0.0.0", "--metrics_token_file=" + dir_ + "/metrics.token",
       "--metrics_tls_cert=" + certs_.server_cert, "--metrics_tls_key=" + certs_.server_key});
  Subprocess worker;
  ASSERT_THAT(worker.Start(argv, dir_ + "/worker-metrics.log"), testing::IsOk());
  std::string port;
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        const std::string log = Log("worker-metrics.log");
        const size_t at = log.find("metrics on https://");
        if (at == std::string::npos) return false;
        const size_t colon = log.find(':', at + std::string("metrics on https://").size());
        const size_t slash = log.find("/metrics", colon);
        if (colon == std::string::npos || slash == std::string::npos) return false;
        port = log.substr(colon + 1, slash - colon - 1);
        return true;
      },
      absl::Seconds(20)))
      << Log("worker-metrics.log");
  const std::string address = "127.0.0.1:" + port;
  testutil::HttpGetOptions get;
  get.tls_ca = certs_.ca;
  auto scrape = testutil::HttpGet(address, "/metrics", get);
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(scrape->status, 401);
  EXPECT_THAT(scrape->body, Not(HasSubstr("mt_worker_info")));
  get.bearer_token = token;
  scrape = testutil::HttpGet(address, "/metrics", get);
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(scrape->status, 200);
  EXPECT_THAT(scrape->body, HasSubstr("mt_worker_info"));
  get.tls_ca = certs_.other_ca;  // a CA that did not sign the worker's certificate
  EXPECT_FALSE(testutil::HttpGet(address, "/metrics", get).ok());
  auto plain = testutil::HttpGet(address, "/metrics", absl::Seconds(5));
  if (plain.ok()) {
    EXPECT_THAT(plain->body, Not(HasSubstr("mt_worker_info")));
  }
  worker.Signal(SIGTERM);
  EXPECT_TRUE(worker.Wait(absl::Seconds(10)).ok());
}

}  // namespace
}  // namespace mt
