// A job through the whole stack behind mutual TLS and role tokens: the coordinator requires
// client certificates, so the ranks' rendezvous only works when mt-worker hands its token and
// TLS files on to them (MT_TOKEN_FILE, MT_TLS_*), and each rank sends the rank credential of
// its assignment (coordinator/rendezvous/rank_credentials.h). The job is its submitter's: another
// submit token cannot cancel it (coordinator/job_access.h).
#include <string>
#include <vector>

#include "absl/strings/strip.h"
#include "common/base/files.h"
#include "common/base/paths.h"
#include "gtest/gtest.h"
#include "tests/testutil/certs.h"
#include "tests/testutil/cluster.h"
#include "tests/testutil/job_fixture.h"

namespace mt {
namespace {

TEST(SecurityJobsTest, TwoRanksTrainBehindMutualTls) {
  testutil::Cluster cluster(testutil::BinDir());
  auto certs = testutil::MakeTestCerts(cluster.dir());
  if (!certs.ok()) GTEST_SKIP() << "openssl cannot make test certificates: " << certs.status();
  const std::string tokens = JoinPath(cluster.dir(), "tokens");
  const std::string user = JoinPath(cluster.dir(), "alice.token");
  const std::string worker = JoinPath(cluster.dir(), "worker.token");
  ASSERT_TRUE(WriteFileAtomically(tokens,
                                  "submit alice alice-token-0123456789abcdef\n"
                                  "submit bob bob-token-0123456789abcdef\n"
                                  "worker node0 worker-token-0123456789abcdef\n")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(user, "alice-token-0123456789abcdef\n").ok());
  ASSERT_TRUE(WriteFileAtomically(worker, "worker-token-0123456789abcdef\n").ok());
  const std::string other = JoinPath(cluster.dir(), "bob.token");
  ASSERT_TRUE(WriteFileAtomically(other, "bob-token-0123456789abcdef\n").ok());
  ASSERT_TRUE(
      cluster
          .StartCoordinator({"--auth_token_file=" + tokens, "--tls_cert=" + certs->server_cert,
                             "--tls_key=" + certs->server_key, "--tls_client_ca=" + certs->ca})
          .ok())
      << cluster.Log("coordinator.log");
  const std::vector<std::string> tls = {"--tls_ca=" + certs->ca, "--tls_cert=" + certs->client_cert,
                                        "--tls_key=" + certs->client_key};
  for (const char* name : {"w0", "w1"}) {
    std::vector<std::string> flags = tls;
    flags.push_back("--token_file=" + worker);
    ASSERT_TRUE(cluster.StartWorker(name, "node0", flags).ok());
  }
  const std::string data = testutil::WriteRepetitiveDataset(cluster.dir(), 64, 200);
  ASSERT_FALSE(data.empty());
  testutil::TinyJob job("tls", data, 4);
  job.dp = "2";
  const std::string spec = JoinPath(cluster.dir(), "job.yaml");
  ASSERT_TRUE(WriteFileAtomically(spec, job.Yaml()).ok());

  std::vector<std::string> submit = {"submit", "--token_file=" + user};
  submit.insert(submit.end(), tls.begin(), tls.end());
  submit.push_back(spec);
  testutil::CommandResult r = cluster.Mtctl(submit);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id(absl::StripAsciiWhitespace(r.out));

  // Bob's submit token cannot cancel Alice's job (exit 5, naming the owner); describe shows it.
  std::vector<std::string> cancel = {"cancel", id, "--token_file=" + other};
  cancel.insert(cancel.end(), tls.begin(), tls.end());
  r = cluster.Mtctl(cancel);
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_NE(r.err.find("the job belongs to 'alice'"), std::string::npos) << r.err;
  std::vector<std::string> describe = {"describe", id, "--token_file=" + other};
  describe.insert(describe.end(), tls.begin(), tls.end());
  r = cluster.Mtctl(describe);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("owner        alice"), std::string::npos) << r.out;

  std::vector<std::string> watch = {"watch", id, "--token_file=" + user};
  watch.insert(watch.end(), tls.begin(), tls.end());
  r = cluster.Mtctl(watch, absl::Seconds(300));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << cluster.Log("w0.log") << cluster.Log("w1.log");
  EXPECT_NE((r.out + r.err).find("SUCCEEDED"), std::string::npos) << r.out << r.err;
}

}  // namespace
}  // namespace mt
