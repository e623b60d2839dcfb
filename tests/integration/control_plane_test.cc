// A real mt-coordinator and real mt-worker daemons on loopback, driven over gRPC and mtctl.
#include <signal.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/base/status_matchers.h"
#include "common/rpc/auth.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mt/v1/client_service.grpc.pb.h"
#include "tests/testutil/cluster.h"
#include "tests/testutil/subprocess.h"

namespace mt {
namespace {

using ::testing::HasSubstr;
using testutil::CommandResult;
using testutil::RunCommand;
using testutil::Subprocess;

const std::string kBin = std::string(MT_BINARY_DIR) + "/bin/";

// A Cluster (tests/testutil/cluster.h) whose coordinator beats faster: 100 ms heartbeats, lost
// after 1 s. Workers are named "worker-<node>-<gpu>" (their logs "<name>.log").
class ControlPlaneTest : public ::testing::Test {
 protected:
  // Starts (or restarts, on the same port) the coordinator and returns its address.
  std::string StartCoordinator(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> flags = {"--heartbeat_interval=100ms", "--lost_after=1s"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    EXPECT_THAT(cluster_.StartCoordinator(flags), testing::IsOk()) << Log("coordinator.log");
    return cluster_.address();
  }

  Subprocess* StartWorker(const std::string& node, int gpu,
                          const std::vector<std::string>& extra = {}) {
    const std::string name = absl::StrCat("worker-", node, "-", gpu);
    EXPECT_THAT(cluster_.StartWorker(name, node, gpu, extra), testing::IsOk());
    return cluster_.worker(name);
  }

  std::string Log(const std::string& name) { return cluster_.Log(name); }

  absl::StatusOr<mt::v1::ListWorkersResponse> ListWorkers(const std::string& token = "") {
    return cluster_.ListWorkers(token);
  }

  int CountInState(mt::v1::WorkerState state) {
    auto r = ListWorkers();
    if (!r.ok()) return -1;
    int n = 0;
    for (const auto& w : r->workers()) n += w.state() == state;
    return n;
  }

  // A worker's state file once it is there: the worker writes it (atomically) when the
  // coordinator's registration reply is in, which may be after the coordinator lists it.
  absl::StatusOr<std::string> WaitForStateFile(const std::string& path) {
    testutil::WaitFor([&] { return ReadFile(path).ok(); }, absl::Seconds(20));
    return ReadFile(path);
  }

  CommandResult Mtctl(std::vector<std::string> args) {
    return cluster_.Mtctl(std::move(args), absl::Seconds(30));
  }

  testutil::Cluster cluster_{kBin};
};

TEST_F(ControlPlaneTest, WorkersRegisterHeartbeatAndAreLostWhenKilled) {
  StartCoordinator();
  auto w1 = StartWorker("nodea", 0);
  auto w2 = StartWorker("nodea", 1);
  ASSERT_TRUE(testutil::WaitFor([&] { return CountInState(mt::v1::WORKER_STATE_IDLE) == 2; },
                                absl::Seconds(20)))
      << Log("coordinator.log");
  auto workers = ListWorkers();
  ASSERT_TRUE(workers.ok());
  EXPECT_EQ(workers->total_count(), 2);
  EXPECT_EQ(workers->workers(0).resources().node(), "nodea");

  // SIGKILL: no deregistration; the coordinator declares it lost after --lost_after.
  w2->Signal(SIGKILL);
  ASSERT_TRUE(testutil::WaitFor([&] { return CountInState(mt::v1::WORKER_STATE_LOST) == 1; },
                                absl::Seconds(10)));
  EXPECT_EQ(CountInState(mt::v1::WORKER_STATE_IDLE), 1);

  // SIGTERM: a clean exit that deregisters.
  w1->Signal(SIGTERM);
  auto code = w1->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << Log("worker-nodea-0.log");
  EXPECT_EQ(CountInState(mt::v1::WORKER_STATE_GONE), 1);
}

TEST_F(ControlPlaneTest, WorkerReRegistersAfterCoordinatorRestart) {
  const std::string first_address = StartCoordinator();
  StartWorker("nodeb", -1, {"--state_file=" + cluster_.dir() + "/worker.id"});
  ASSERT_TRUE(testutil::WaitFor([&] { return CountInState(mt::v1::WORKER_STATE_IDLE) == 1; },
                                absl::Seconds(20)));
  cluster_.coordinator()->Signal(SIGTERM);
  ASSERT_TRUE(cluster_.coordinator()->Wait(absl::Seconds(10)).ok());
  // Same port again, so the worker's address still points at it.
  ASSERT_EQ(StartCoordinator(), first_address);
  ASSERT_TRUE(testutil::WaitFor([&] { return CountInState(mt::v1::WORKER_STATE_IDLE) == 1; },
                                absl::Seconds(20)))
      << Log("worker-nodeb--1.log");
  auto workers = ListWorkers();
  ASSERT_TRUE(workers.ok());
  EXPECT_EQ(workers->workers(0).id(), "w-1");  // kept its id through --state_file
  EXPECT_EQ(workers->workers(0).resources().device_name(), "cpu");
}

TEST_F(ControlPlaneTest, ACopiedStateFileDoesNotTakeOverALiveWorker) {
  StartCoordinator();
  const std::string state = cluster_.dir() + "/worker.state";
  auto first = StartWorker("nodec", -1, {"--state_file=" + state});
  ASSERT_TRUE(testutil::WaitFor([&] { return CountInState(mt::v1::WORKER_STATE_IDLE) == 1; },
                                absl::Seconds(20)));
  auto text = WaitForStateFile(state);
  ASSERT_TRUE(text.ok()) << Log("worker-nodec--1.log");
  EXPECT_THAT(*text, HasSubstr("mt-worker-state 1\nworker_id w-1\ncredential "));
  ASSERT_TRUE(WriteFileAtomically(cluster_.dir() + "/copy.state", *text).ok());
  // A second daemon with the copy keeps being refused while the first one heartbeats.
  StartWorker("thief", -1, {"--state_file=" + cluster_.dir() + "/copy.state"});
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        return Log("worker-thief--1.log").find("connected from another daemon") !=
               std::string::npos;
      },
      absl::Seconds(20)))
      << Log("worker-thief--1.log");
  auto workers = ListWorkers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->total_count(), 1);
  EXPECT_EQ(workers->workers(0).resources().node(), "nodec");
  EXPECT_EQ(workers->workers(0).state(), mt::v1::WORKER_STATE_IDLE);
  // A genuine restart: the first daemon is gone (no heartbeats for --lost_after); the daemon
  // holding the credential comes back as w-1.
  first->Signal(SIGKILL);
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        auto w = ListWorkers();
        return w.ok() && w->total_count() == 1 && w->workers(0).resources().node() == "thief" &&
               w->workers(0).state() == mt::v1::WORKER_STATE_IDLE;
      },
      absl::Seconds(20)))
      << Log("worker-thief--1.log");
}

// Worker identities outlive a coordinator restart (issue 19): the restarted coordinator still
// knows w-1's credential, so a state file naming w-1 with another credential is refused (it
// was adopted before: registrations lived in memory only) and the genuine daemon keeps w-1.
TEST_F(ControlPlaneTest, AForgedCredentialIsRefusedAfterACoordinatorRestart) {
  const std::string address = StartCoordinator();
  const std::string state = cluster_.dir() + "/worker.state";
  auto genuine = StartWorker("noded", -1, {"--state_file=" + state});
  ASSERT_TRUE(testutil::WaitFor([&] { return CountInState(mt::v1::WORKER_STATE_IDLE) == 1; },
                                absl::Seconds(20)));
  auto text = WaitForStateFile(state);
  ASSERT_TRUE(text.ok()) << Log("worker-noded--1.log");
  const size_t at = text->find("credential ");
  ASSERT_NE(at, std::string::npos) << *text;
  std::string forged = *text;
  forged.replace(at + 11, 64, std::string(64, '7'));
  ASSERT_NE(forged, *text);
  ASSERT_TRUE(WriteFileAtomically(cluster_.dir() + "/forged.state", forged).ok());
  genuine->Signal(SIGTERM);
  ASSERT_TRUE(genuine->Wait(absl::Seconds(20)).ok());
  cluster_.coordinator()->Signal(SIGKILL);
  ASSERT_TRUE(cluster_.coordinator()->Wait(absl::Seconds(10)).ok());
  ASSERT_EQ(StartCoordinator(), address);

  StartWorker("forger", -1, {"--state_file=" + cluster_.dir() + "/forged.state"});
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        return Log("worker-forger--1.log").find("does not match the one issued") !=
               std::string::npos;
      },
      absl::Seconds(20)))
      << Log("worker-forger--1.log");
  auto workers = ListWorkers();
  ASSERT_TRUE(workers.ok());
  for (const auto& w : workers->workers()) {
    EXPECT_FALSE(w.resources().node() == "forger" && w.state() == mt::v1::WORKER_STATE_IDLE);
  }
  StartWorker("noded", -1, {"--state_file=" + state});
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        auto w = ListWorkers();
        if (!w.ok()) return false;
        for (const auto& worker : w->workers()) {
          if (worker.id() == "w-1" && worker.resources().node() == "noded" &&
              worker.state() == mt::v1::WORKER_STATE_IDLE) {
            return true;
          }
        }
        return false;
      },
      absl::Seconds(20)))
      << Log("coordinator.log");
}

TEST_F(ControlPlaneTest, BearerTokensAreRequiredWhenConfigured) {
  const std::string tokens = cluster_.dir() + "/tokens";
  ASSERT_THAT(WriteFileAtomically(tokens, "s3cret-token-0123456789\n"), testing::IsOk());
  StartCoordinator({"--auth_token_file=" + tokens});
  EXPECT_THAT(ListWorkers(), testing::StatusIs(absl::StatusCode::kUnauthenticated,
                                               HasSubstr("missing bearer token")));
  EXPECT_THAT(ListWorkers("wrong-token-000000000000"),
              testing::StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("not accepted")));
  EXPECT_TRUE(ListWorkers("s3cret-token-0123456789").ok());
  // A worker without the token cannot register; with it, it can.
  auto bad = StartWorker("nodec", 0);
  auto code = bad->Wait(absl::Seconds(20));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 1);
  EXPECT_THAT(Log("worker-nodec-0.log"), HasSubstr("missing bearer token"));
  StartWorker("nodec", 1, {"--token_file=" + tokens});
  EXPECT_TRUE(testutil::WaitFor(
      [&] {
        auto r = ListWorkers("s3cret-token-0123456789");
        return r.ok() && r->total_count() == 1;
      },
      absl::Seconds(20)));
  // mtctl: exit code 5 without the token.
  CommandResult r = Mtctl({"workers"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  r = Mtctl({"workers", "--token_file=" + tokens, "-o", "json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"node\": \"nodec\""));
}

TEST_F(ControlPlaneTest, NonLoopbackListenWithoutTokensIsRefused) {
  auto r = RunCommand({kBin + "mt-coordinator", "--listen=0.0.0.0:0"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("requires --auth-token-file"));
}

TEST_F(ControlPlaneTest, NonLoopbackListenWithoutAllowedRootsIsRefused) {
  const std::string dir = cluster_.dir();
  const std::string tokens = dir + "/tokens";
  ASSERT_THAT(WriteFileAtomically(tokens, "0123456789abcdef0123456789abcdef\n"), testing::IsOk());
  auto r = RunCommand({kBin + "mt-coordinator", "--listen=0.0.0.0:0", "--state_dir=" + dir,
                       "--auth_token_file=" + tokens, "--metrics_port=-1"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("requires --allowed-root DIR"));
  // A root that does not exist is a startup error naming it (the flag is repeatable).
  r = RunCommand({kBin + "mt-coordinator", "--listen=127.0.0.1:0", "--state_dir=" + dir,
                  "--metrics_port=-1", "--allowed-root=" + dir, "--allowed-root", dir + "/nope"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("--allowed-root '" + dir + "/nope' is not an existing directory"));
  // A server that fails part way through its start-up exits with the reason (it crashed while
  // tearing down what it had not built yet).
  ASSERT_THAT(WriteFileAtomically(dir + "/file", "x"), testing::IsOk());
  r = RunCommand({kBin + "mt-coordinator", "--listen=127.0.0.1:0",
                  "--state_dir=" + dir + "/file/state", "--metrics_port=-1"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("--state-dir"));
}

TEST_F(ControlPlaneTest, HealthServiceAnswers) {
  StartCoordinator();
  auto channel = rpc::MakeChannel(cluster_.address(), "");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // grpc.health.v1.Health/Check with an empty request (service "") as a raw call.
  grpc::GenericStub generic(channel);
  grpc::ByteBuffer request, response;
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  grpc::Status status;
  bool done = false;
  absl::Mutex mu;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      absl::MutexLock l(&mu);
                      status = s;
                      done = true;
                    });
  absl::MutexLock l(&mu);
  mu.Await(absl::Condition(&done));
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status: SERVING (1)} = field 1, varint 1.
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

// The catalog answers over gRPC, and refuses bad names and paths (path traversal, NUL bytes,
// relative paths) at the API with INVALID_ARGUMENT naming the field.
TEST_F(ControlPlaneTest, CheckpointCallsCheckTheirInput) {
  StartCoordinator();
  auto stub = mt::v1::ClientService::NewStub(rpc::MakeChannel(cluster_.address(), ""));
  auto deadline = [](grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  };
  {
    grpc::ClientContext ctx;
    deadline(&ctx);
    mt::v1::ListCheckpointsResponse resp;
    MT_ASSERT_OK(rpc::FromGrpcStatus(stub->ListCheckpoints(&ctx, {}, &resp)));
    EXPECT_EQ(resp.total_count(), 0);
  }
  const std::vector<std::pair<std::string, std::string>> dirs = {
      {std::string("/tmp/a\0/b", 8), "NUL"},
      {"/tmp/../etc", "'..'"},
      {"relative/dir", "relative"},
      {"", "empty"},
  };
  for (const auto& [dir, why] : dirs) {
    grpc::ClientContext ctx;
    deadline(&ctx);
    mt::v1::ImportCheckpointRequest req;
    req.set_directory(dir);
    mt::v1::Checkpoint resp;
    EXPECT_THAT(rpc::FromGrpcStatus(stub->ImportCheckpoint(&ctx, req, &resp)),
                testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                  ::testing::AllOf(HasSubstr("directory"), HasSubstr(why))))
        << why;
    grpc::ClientContext ctx2;
    deadline(&ctx2);
    mt::v1::ExportCheckpointRequest ex;
    ex.set_checkpoint_id("c-1");
    ex.set_output_dir(dir);
    mt::v1::ExportCheckpointResponse ex_resp;
    EXPECT_THAT(rpc::FromGrpcStatus(stub->ExportCheckpoint(&ctx2, ex, &ex_resp)),
                testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                  ::testing::AllOf(HasSubstr("output_dir"), HasSubstr(why))))
        << why;
  }
  for (const std::string& id : {std::string("../c-1"), std::string("c-1\0x", 5)}) {
    grpc::ClientContext ctx;
    deadline(&ctx);
    mt::v1::GetCheckpointRequest req;
    req.set_checkpoint_id(id);
    mt::v1::Checkpoint resp;
    EXPECT_THAT(rpc::FromGrpcStatus(stub->GetCheckpoint(&ctx, req, &resp)),
                testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checkpoint_id")));
  }
  grpc::ClientContext ctx;
  deadline(&ctx);
  mt::v1::DeleteCheckpointRequest del;
  del.set_checkpoint_id("c-5");
  mt::v1::Checkpoint resp;
  EXPECT_THAT(rpc::FromGrpcStatus(stub->DeleteCheckpoint(&ctx, del, &resp)),
              testing::StatusIs(absl::StatusCode::kNotFound));
}

// A tp=2 job as Megatron-LM flags (dp: auto).
const std::vector<std::string> kTp2Job = {"--num-layers",
                                          "4",
                                          "--hidden-size",
                                          "64",
                                          "--num-attention-heads",
                                          "4",
                                          "--seq-length",
                                          "32",
                                          "--tensor-model-parallel-size",
                                          "2",
                                          "--micro-batch-size",
                                          "2",
                                          "--global-batch-size",
                                          "8",
                                          "--lr",
                                          "1e-3",
                                          "--train-iters",
                                          "10",
                                          "--data-path",
                                          "/data/x_text_document",
                                          "--vocab-file",
                                          "/v.json",
                                          "--merge-file",
                                          "/m.txt"};

std::vector<std::string> Args(std::vector<std::string> head, const std::vector<std::string>& flags,
                              const std::vector<std::string>& tail = {}) {
  head.insert(head.end(), flags.begin(), flags.end());
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

TEST_F(ControlPlaneTest, MtctlPlanShowsLayoutAndPlacement) {
  StartCoordinator();
  StartWorker("nodea", 0);
  StartWorker("nodea", 1);
  StartWorker("nodeb", 0);
  StartWorker("nodeb", 1);
  ASSERT_TRUE(testutil::WaitFor([&] { return CountInState(mt::v1::WORKER_STATE_IDLE) == 4; },
                                absl::Seconds(20)));
  CommandResult r = Mtctl(Args({"plan", "--megatron", "--"}, kTp2Job, {"-o", "json"}));
  // -o after `--` belongs to the Megatron flags and is rejected by name.
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("-o"));
  r = Mtctl(Args({"plan", "-o", "json", "--megatron", "--"}, kTp2Job));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // dp: auto over 4 GPU workers with tp 2 -> dp 2; TP groups never span nodes.
  EXPECT_THAT(r.out, HasSubstr("\"world_size\": 4"));
  EXPECT_THAT(r.out, HasSubstr("\"data_parallel_size\": 2"));
  EXPECT_THAT(r.out, HasSubstr("\"placeable\": true"));
  r = Mtctl(Args({"plan", "--megatron", "--"}, kTp2Job));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tp groups    [0,1] [2,3]"));
  EXPECT_THAT(r.out, HasSubstr("dp groups    [0,2] [1,3]"));
  // Ranks 0,1 on one node, 2,3 on the other.
  EXPECT_THAT(r.out, ::testing::ContainsRegex("0 +0 +0 +0 +w-[0-9] +nodea +0"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("3 +1 +1 +0 +w-[0-9] +nodeb +1"));

  // An invalid spec: exit 2, the field named, nothing sent.
  r = Mtctl({"plan", "--megatron",    "--",   "--num-layers",
             "4",    "--hidden-size", "60",   "--num-attention-heads",
             "8",    "--seq-length",  "32",   "--micro-batch-size",
             "2",    "--lr",          "1e-3", "--train-iters",
             "10",   "--data-path",   "/d",   "--vocab-file",
             "/v",   "--merge-file",  "/m"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("hidden_size"));

  // tp 4 cannot fit in nodes of 2 GPUs: not placeable, exit 1, with the reason.
  r = Mtctl({"plan", "--megatron",         "--", "--num-layers",
             "4",    "--hidden-size",      "64", "--num-attention-heads",
             "4",    "--seq-length",       "32", "--tensor-model-parallel-size",
             "4",    "--micro-batch-size", "2",  "--lr",
             "1e-3", "--train-iters",      "10", "--data-path",
             "/d",   "--vocab-file",       "/v", "--merge-file",
             "/m"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("does not fit on any node"));
}

TEST(Binaries, AnswerHelpAndVersion) {
  for (const std::string bin : {"mt-coordinator", "mt-worker", "mtctl"}) {
    auto help = RunCommand({kBin + bin, "--help"});
    ASSERT_TRUE(help.ok());
    EXPECT_EQ(help->exit_code, 0) << bin;
    EXPECT_THAT(help->out + help->err, HasSubstr(bin)) << bin;
    auto version = RunCommand({kBin + bin, "--version"});
    ASSERT_TRUE(version.ok());
    EXPECT_EQ(version->exit_code, 0) << bin;
    EXPECT_THAT(version->out, HasSubstr("0.1.0")) << bin;
  }
  auto r = RunCommand({kBin + "mtctl", "plan", "--help"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_THAT(r->out, HasSubstr("mtctl plan JOB.yaml"));
  r = RunCommand({kBin + "mtctl", "frobnicate"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_THAT(r->err, HasSubstr("unknown verb 'frobnicate'"));
}

}  // namespace
}  // namespace mt
