// The coordinator's gRPC services through a real Server on 127.0.0.1:0 (in-process, a real
// Store under a temp dir): auth, worker registration, submit -> placement -> the assignment
// stream carrying the resolved spec, rendezvous, cluster info and listing.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "common/base/clock.h"
#include "common/rpc/auth.h"
#include "common/rpc/worker_credential.h"
#include "coordinator/server.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mt/v1/client_service.grpc.pb.h"
#include "mt/v1/worker_service.grpc.pb.h"
#include "tests/testutil/service_spec.h"
#include "tests/testutil/subprocess.h"

namespace mt::coordinator {
namespace {

constexpr char kToken[] = "s3cret-token-for-the-services-test-0123456789";

// DP left to the scheduler, global batch left to DP.
mt::v1::JobSpec AutoDpSpec() { return testutil::ServiceJobSpec("svc"); }

class ServicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testutil::MakeTempDir("coord_services");
    std::ofstream(dir + "/tokens") << kToken << "\n";
    CoordinatorConfig config;
    config.listen_address = "127.0.0.1:0";
    config.state_dir = dir + "/state";
    config.auth_token_file = dir + "/tokens";
    config.metrics_port = -1;
    auto server = Server::Create(config, &clock_);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(*server);
    auto channel = rpc::MakeChannel(server_->address(), kToken);
    client_ = mt::v1::ClientService::NewStub(channel);
    worker_ = mt::v1::WorkerService::NewStub(channel);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  std::string Register(const std::string& node) {
    grpc::ClientContext ctx;
    mt::v1::RegisterRequest req;
    req.mutable_resources()->set_node(node);
    req.mutable_resources()->set_gpu_index(-1);
    req.mutable_resources()->set_device_name("cpu");
    req.mutable_resources()->set_memory_bytes(1 << 30);
    req.mutable_resources()->set_cpu_cores(1);
    mt::v1::RegisterResponse resp;
    grpc::Status s = worker_->Register(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    registered_[resp.worker_id()] = resp;
    return resp.worker_id();
  }
  // The session metadata of `worker_id`'s registration, as its daemon sends it.
  void AsWorker(grpc::ClientContext* ctx, const std::string& worker_id) {
    ctx->AddMetadata(rpc::kWorkerSessionHeader, registered_[worker_id].session());
  }
  grpc::Status ReportExit(const std::string& as_worker, const std::string& claimed_worker,
                          const std::string& job_id, int rank) {
    grpc::ClientContext ctx;
    AsWorker(&ctx, as_worker);
    mt::v1::RankExitReport report;
    report.set_worker_id(claimed_worker);
    report.set_job_id(job_id);
    report.set_rank(rank);
    report.set_outcome(mt::v1::RANK_OUTCOME_FAILED);
    mt::v1::RankExitResponse resp;
    return worker_->ReportRankExit(&ctx, report, &resp);
  }

  // Submits AutoDpSpec (world 1 on one free worker) and returns the job's id.
  std::string Submit() {
    grpc::ClientContext ctx;
    mt::v1::SubmitJobRequest submit;
    *submit.mutable_spec() = AutoDpSpec();
    mt::v1::SubmitJobResponse submitted;
    const grpc::Status s = client_->SubmitJob(&ctx, submit, &submitted);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return submitted.job().id();
  }
  // The first assignment on `worker_id`'s stream (empty after 10 s without one).
  mt::v1::Assignment TakeAssignment(const std::string& worker_id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    AsWorker(&ctx, worker_id);
    mt::v1::StreamAssignmentsRequest req;
    req.set_worker_id(worker_id);
    auto reader = worker_->StreamAssignments(&ctx, req);
    mt::v1::WorkerCommand cmd;
    mt::v1::Assignment a;
    if (reader->Read(&cmd) && cmd.has_assign()) a = cmd.assign();
    ctx.TryCancel();
    return a;
  }
  // A rank's rendezvous call, as worker/parallel/rendezvous_client.cc makes it.
  void AsRank(grpc::ClientContext* ctx, const mt::v1::Assignment& a) {
    ctx->AddMetadata(rpc::kRankCredentialHeader, a.rank_credential());
  }

  RealClock clock_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<mt::v1::ClientService::Stub> client_;
  std::unique_ptr<mt::v1::WorkerService::Stub> worker_;
  std::map<std::string, mt::v1::RegisterResponse> registered_;
};

TEST_F(ServicesTest, CallsWithoutTheTokenAreRefused) {
  auto stub = mt::v1::ClientService::NewStub(rpc::MakeChannel(server_->address(), ""));
  grpc::ClientContext ctx;
  mt::v1::ClusterInfo info;
  EXPECT_EQ(stub->GetClusterInfo(&ctx, {}, &info).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ServicesTest, SubmittedJobIsPlacedWithItsResolvedSpec) {
  const std::string w1 = Register("n0");
  Register("n0");
  grpc::ClientContext submit_ctx;
  mt::v1::SubmitJobRequest submit;
  *submit.mutable_spec() = AutoDpSpec();
  mt::v1::SubmitJobResponse submitted;
  ASSERT_TRUE(client_->SubmitJob(&submit_ctx, submit, &submitted).ok());

  grpc::ClientContext get_ctx;
  mt::v1::GetJobRequest get;
  get.set_job_id(submitted.job().id());
  mt::v1::Job job;
  ASSERT_TRUE(client_->GetJob(&get_ctx, get, &job).ok());
  EXPECT_EQ(job.state(), mt::v1::JOB_STATE_SCHEDULED) << job.reason();
  EXPECT_EQ(job.layout().data_parallel_size(), 2);
  EXPECT_EQ(job.spec().training().global_batch_size(), 4) << "micro 2 * DP 2, stored";
  EXPECT_EQ(job.progress().total_steps(), 7);

  grpc::ClientContext stream_ctx;
  stream_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  mt::v1::StreamAssignmentsRequest stream_req;
  stream_req.set_worker_id(w1);
  AsWorker(&stream_ctx, w1);
  auto reader = worker_->StreamAssignments(&stream_ctx, stream_req);
  mt::v1::WorkerCommand cmd;
  ASSERT_TRUE(reader->Read(&cmd));
  ASSERT_TRUE(cmd.has_assign());
  mt::v1::JobSpec assigned;
  ASSERT_TRUE(assigned.ParseFromString(cmd.assign().spec()));
  EXPECT_EQ(assigned.training().global_batch_size(), 4);
  EXPECT_EQ(cmd.assign().job_id(), job.id());
  stream_ctx.TryCancel();
}

TEST_F(ServicesTest, WorkerCallsNeedTheirSessionAndRankExitsTheirWorker) {
  const std::string w1 = Register("n0");
  const std::string w2 = Register("n1");
  EXPECT_EQ(registered_[w1].worker_credential().size(), 64u);
  grpc::ClientContext submit_ctx;
  mt::v1::SubmitJobRequest submit;
  *submit.mutable_spec() = AutoDpSpec();
  mt::v1::SubmitJobResponse submitted;
  ASSERT_TRUE(client_->SubmitJob(&submit_ctx, submit, &submitted).ok());
  const std::string job_id = submitted.job().id();
  grpc::ClientContext get_ctx;
  mt::v1::GetJobRequest get;
  get.set_job_id(job_id);
  mt::v1::Job job;
  ASSERT_TRUE(client_->GetJob(&get_ctx, get, &job).ok());
  ASSERT_EQ(job.placement_size(), 2);
  const std::string holder = job.placement(0).worker_id();
  const std::string other = holder == w1 ? w2 : w1;

  // Another worker cannot end a rank it does not hold, nor speak as its holder.
  grpc::Status s = ReportExit(other, other, job_id, 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("runs on " + holder), std::string::npos) << s.error_message();
  s = ReportExit(other, holder, job_id, 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("worker " + holder), std::string::npos) << s.error_message();
  // A call without a session, and a second daemon with a copy of the holder's state file.
  {
    grpc::ClientContext ctx;
    mt::v1::HeartbeatRequest hb;
    hb.set_worker_id(holder);
    mt::v1::HeartbeatResponse resp;
    EXPECT_EQ(worker_->Heartbeat(&ctx, hb, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext ctx;
    mt::v1::RegisterRequest copy;
    copy.set_worker_id(holder);
    copy.set_worker_credential(registered_[holder].worker_credential());
    copy.mutable_resources()->set_node("thief");
    copy.mutable_resources()->set_gpu_index(-1);
    mt::v1::RegisterResponse resp;
    EXPECT_EQ(worker_->Register(&ctx, copy, &resp).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  }
  grpc::ClientContext after_ctx;
  ASSERT_TRUE(client_->GetJob(&after_ctx, get, &job).ok());
  EXPECT_EQ(job.state(), mt::v1::JOB_STATE_SCHEDULED) << job.reason();
  // The holder itself is heard.
  s = ReportExit(holder, holder, job_id, 0);
  EXPECT_TRUE(s.ok()) << s.error_message();
  grpc::ClientContext failed_ctx;
  ASSERT_TRUE(client_->GetJob(&failed_ctx, get, &job).ok());
  EXPECT_NE(job.state(), mt::v1::JOB_STATE_SCHEDULED);
}

TEST_F(ServicesTest, SecondLiveJobCannotShareASaveDir) {
  mt::v1::SubmitJobResponse first;
  {
    grpc::ClientContext ctx;
    mt::v1::SubmitJobRequest submit;
    *submit.mutable_spec() = AutoDpSpec();
    submit.mutable_spec()->mutable_checkpoint()->set_save_dir("/ckpt/shared");
    submit.set_request_id("first-submit");
    ASSERT_TRUE(client_->SubmitJob(&ctx, submit, &first).ok());
  }
  {  // an idempotent retry of the same submit is not a conflict with itself
    grpc::ClientContext ctx;
    mt::v1::SubmitJobRequest submit;
    *submit.mutable_spec() = AutoDpSpec();
    submit.mutable_spec()->mutable_checkpoint()->set_save_dir("/ckpt/shared");
    submit.set_request_id("first-submit");
    mt::v1::SubmitJobResponse again;
    ASSERT_TRUE(client_->SubmitJob(&ctx, submit, &again).ok());
    EXPECT_EQ(again.job().id(), first.job().id());
  }
  grpc::ClientContext ctx;
  mt::v1::SubmitJobRequest submit;
  *submit.mutable_spec() = AutoDpSpec();
  submit.mutable_spec()->mutable_checkpoint()->set_save_dir("/ckpt/shared");
  mt::v1::SubmitJobResponse second;
  grpc::Status s = client_->SubmitJob(&ctx, submit, &second);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("/ckpt/shared is in use by job " + first.job().id()),
            std::string::npos)
      << s.error_message();
}

TEST_F(ServicesTest, SubmitRefusesAModelNoWorkerCanHold) {
  grpc::ClientContext reg_ctx;
  mt::v1::RegisterRequest req;
  req.mutable_resources()->set_node("small");
  req.mutable_resources()->set_gpu_index(-1);
  req.mutable_resources()->set_memory_bytes(64 << 10);
  mt::v1::RegisterResponse resp;
  ASSERT_TRUE(worker_->Register(&reg_ctx, req, &resp).ok());
  grpc::ClientContext ctx;
  mt::v1::SubmitJobRequest submit;
  *submit.mutable_spec() = AutoDpSpec();
  mt::v1::SubmitJobResponse out;
  grpc::Status s = client_->SubmitJob(&ctx, submit, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("no CPU worker can hold a rank"), std::string::npos)
      << s.error_message();
}

TEST_F(ServicesTest, PlanJobLeavesTheSpecAsSubmitted) {
  Register("n0");
  grpc::ClientContext ctx;
  mt::v1::PlanJobRequest req;
  *req.mutable_spec() = AutoDpSpec();
  mt::v1::PlanJobResponse plan;
  ASSERT_TRUE(client_->PlanJob(&ctx, req, &plan).ok());
  EXPECT_TRUE(plan.placeable()) << plan.reason();
  EXPECT_EQ(plan.layout().world_size(), 1);
}

TEST_F(ServicesTest, RendezvousThroughTheWorkerService) {
  const std::string w = Register("n0");
  const std::string id = Submit();
  const mt::v1::Assignment a = TakeAssignment(w);
  ASSERT_EQ(a.job_id(), id);
  ASSERT_EQ(a.rank_credential().size(), 64u);
  {
    grpc::ClientContext ctx;
    AsRank(&ctx, a);
    mt::v1::RendezvousSetRequest req;
    req.set_job_id(id);
    req.set_key("master");
    req.set_value("h:1");
    mt::v1::RendezvousSetResponse resp;
    const grpc::Status s = worker_->RendezvousSet(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    AsRank(&ctx, a);
    mt::v1::RendezvousAddRequest req;
    req.set_job_id(id);
    req.set_key("n");
    req.set_delta(3);
    mt::v1::RendezvousAddResponse resp;
    ASSERT_TRUE(worker_->RendezvousAdd(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.value(), 3);
  }
  {
    grpc::ClientContext ctx;
    AsRank(&ctx, a);
    mt::v1::RendezvousGetRequest req;
    req.set_job_id(id);
    req.add_keys("master");
    req.add_keys("n");
    mt::v1::RendezvousGetResponse resp;
    ASSERT_TRUE(worker_->RendezvousGet(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.values_size(), 2);
    EXPECT_EQ(resp.values(0), "h:1");
    EXPECT_EQ(resp.values(1), "3");
  }
  {  // the credential names attempt 0: another attempt's space is out of its reach
    grpc::ClientContext ctx;
    AsRank(&ctx, a);
    mt::v1::RendezvousSetRequest req;
    req.set_job_id(id);
    req.set_attempt(1);
    req.set_key("k");
    mt::v1::RendezvousSetResponse resp;
    EXPECT_EQ(worker_->RendezvousSet(&ctx, req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
}

// Issue #20: a worker token reaches the rendezvous keys only of the ranks its worker holds.
// Two workers, a job on each: the one holding job B cannot read, write or count job A's keys
// with its own rank's credential, nor with none, nor claim another rank of job A.
TEST_F(ServicesTest, AWorkerReachesOnlyItsOwnRanksRendezvous) {
  const std::string wa = Register("na");
  const std::string job_a = Submit();
  const mt::v1::Assignment a = TakeAssignment(wa);
  const std::string wb = Register("nb");
  const std::string job_b = Submit();
  const mt::v1::Assignment b = TakeAssignment(wb);
  ASSERT_EQ(a.job_id(), job_a);
  ASSERT_EQ(b.job_id(), job_b);
  ASSERT_NE(a.rank_credential(), b.rank_credential());
  auto set = [&](const mt::v1::Assignment* as, const std::string& job, int rank) {
    grpc::ClientContext ctx;
    if (as != nullptr) AsRank(&ctx, *as);
    mt::v1::RendezvousSetRequest req;
    req.set_job_id(job);
    req.set_rank(rank);
    req.set_key("master");
    req.set_value("evil:1");
    mt::v1::RendezvousSetResponse resp;
    return worker_->RendezvousSet(&ctx, req, &resp);
  };
  grpc::Status s = set(&b, job_a, 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("rendezvous of " + job_a + " attempt 0 rank 0"),
            std::string::npos)
      << s.error_message();
  s = set(nullptr, job_a, 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("carries no x-mt-rank-credential"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(set(&a, job_a, 1).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  {
    grpc::ClientContext ctx;
    AsRank(&ctx, b);
    mt::v1::RendezvousGetRequest req;
    req.set_job_id(job_a);
    req.add_keys("master");
    mt::v1::RendezvousGetResponse resp;
    EXPECT_EQ(worker_->RendezvousGet(&ctx, req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext ctx;
    AsRank(&ctx, b);
    mt::v1::RendezvousAddRequest req;
    req.set_job_id(job_a);
    req.set_key("n");
    req.set_delta(1);
    mt::v1::RendezvousAddResponse resp;
    EXPECT_EQ(worker_->RendezvousAdd(&ctx, req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  // Each holder reaches its own job's keys; job A's were never written by worker B.
  EXPECT_TRUE(set(&b, job_b, 0).ok());
  {
    grpc::ClientContext ctx;
    AsRank(&ctx, a);
    mt::v1::RendezvousAddRequest req;
    req.set_job_id(job_a);
    req.set_key("master-count");
    req.set_delta(1);
    mt::v1::RendezvousAddResponse resp;
    ASSERT_TRUE(worker_->RendezvousAdd(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.value(), 1);
  }
  {
    grpc::ClientContext ctx;
    AsRank(&ctx, a);
    mt::v1::RendezvousGetRequest req;
    req.set_job_id(job_a);
    req.add_keys("master");
    *req.mutable_timeout() = google::protobuf::util::TimeUtil::MillisecondsToDuration(100);
    mt::v1::RendezvousGetResponse resp;
    EXPECT_EQ(worker_->RendezvousGet(&ctx, req, &resp).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
}

TEST_F(ServicesTest, ClusterInfoAndWorkerPages) {
  for (int i = 0; i < 3; ++i) Register("n" + std::to_string(i));
  grpc::ClientContext info_ctx;
  mt::v1::ClusterInfo info;
  ASSERT_TRUE(client_->GetClusterInfo(&info_ctx, {}, &info).ok());
  EXPECT_EQ(info.workers_total(), 3);
  EXPECT_EQ(info.workers_idle(), 3);
  EXPECT_FALSE(info.version().empty());

  grpc::ClientContext list_ctx;
  mt::v1::ListWorkersRequest req;
  req.set_page_size(2);
  mt::v1::ListWorkersResponse page;
  ASSERT_TRUE(client_->ListWorkers(&list_ctx, req, &page).ok());
  EXPECT_EQ(page.workers_size(), 2);
  EXPECT_EQ(page.total_count(), 3);
  EXPECT_EQ(page.next_page_token(), "2");

  grpc::ClientContext bad_ctx;
  req.set_page_size(5000);
  EXPECT_EQ(client_->ListWorkers(&bad_ctx, req, &page).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServicesTest, UnknownJobIsNotFound) {
  grpc::ClientContext ctx;
  mt::v1::GetJobRequest req;
  req.set_job_id("j-999");
  mt::v1::Job job;
  EXPECT_EQ(client_->GetJob(&ctx, req, &job).error_code(), grpc::StatusCode::NOT_FOUND);
}

// Issue #20: with --allowed-root, a spec whose paths resolve outside the roots is refused at
// SubmitJob, naming each field; paths inside are accepted.
TEST(ConfinedSubmitTest, PathsOutsideTheAllowedRootsAreRefused) {
  char real[4096];
  const std::string tmp = testutil::MakeTempDir("coord_confined");
  ASSERT_NE(::realpath(tmp.c_str(), real), nullptr);
  const std::string dir = real;
  const std::string root = dir + "/data";
  ASSERT_EQ(::mkdir(root.c_str(), 0755), 0);
  ASSERT_EQ(::symlink("/var/tmp", (root + "/tb").c_str()), 0);
  CoordinatorConfig config;
  config.listen_address = "127.0.0.1:0";
  config.state_dir = dir + "/state";
  config.metrics_port = -1;
  config.allowed_roots = {root};
  RealClock clock;
  auto server = Server::Create(config, &clock);
  ASSERT_TRUE(server.ok()) << server.status().message();
  auto client = mt::v1::ClientService::NewStub(rpc::MakeChannel((*server)->address(), ""));

  mt::v1::SubmitJobRequest submit;
  mt::v1::JobSpec& s = *submit.mutable_spec();
  s = AutoDpSpec();
  s.mutable_data()->mutable_data_path(0)->set_prefix(root + "/x");
  s.mutable_data()->mutable_tokenizer()->set_vocab_file(root + "/v.json");
  s.mutable_data()->mutable_tokenizer()->set_merge_file(root + "/m.txt");
  s.mutable_checkpoint()->set_save_dir("/root/ck");
  s.mutable_logging()->set_tensorboard_dir(root + "/tb/run");
  {
    grpc::ClientContext ctx;
    mt::v1::SubmitJobResponse resp;
    const grpc::Status st = client->SubmitJob(&ctx, submit, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(st.error_message(),
                ::testing::AllOf(::testing::HasSubstr("checkpoint.save_dir: '/root/ck' is outside"),
                                 ::testing::HasSubstr("logging.tensorboard_dir: '" + root +
                                                      "/tb/run' (it resolves to '/var/tmp/run')")));
  }
  s.mutable_checkpoint()->set_save_dir(root + "/ck");
  s.mutable_logging()->set_tensorboard_dir(root + "/runs");
  {
    grpc::ClientContext ctx;
    mt::v1::SubmitJobResponse resp;
    const grpc::Status st = client->SubmitJob(&ctx, submit, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  (*server)->Shutdown();
}

}  // namespace
}  // namespace mt::coordinator
