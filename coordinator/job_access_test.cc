// Job ownership (issue #20): the rule on its own, then through a real in-process coordinator
// with role tokens, across restarts of it on the same state directory: a submit token cancels
// and deletes only its own jobs, an admin any, a read token reads every job; a job from a
// coordinator without tokens has no owner and is the admins' alone.
#include "coordinator/job_access.h"

#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/clock.h"
#include "coordinator/server.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mt/v1/client_service.grpc.pb.h"
#include "tests/testutil/service_spec.h"
#include "tests/testutil/subprocess.h"

namespace mt::coordinator {
namespace {

using ::testing::HasSubstr;

mt::v1::Job JobOf(const std::string& owner) {
  mt::v1::Job job;
  job.set_id("j-7");
  job.set_owner(owner);
  return job;
}

TEST(JobAccess, OwnerAndAdminMayActOthersMayNot) {
  const rpc::Principal alice{"alice", rpc::Role::kSubmit};
  const rpc::Principal bob{"bob", rpc::Role::kSubmit};
  const rpc::Principal ops{"ops", rpc::Role::kAdmin};
  const rpc::Principal viewer{"alice", rpc::Role::kRead};  // the owner's name, a read token
  EXPECT_TRUE(CheckJobAccess(alice, JobOf("alice"), "CancelJob").ok());
  EXPECT_TRUE(CheckJobAccess(ops, JobOf("alice"), "CancelJob").ok());
  EXPECT_TRUE(CheckJobAccess(ops, JobOf(""), "DeleteJob").ok());
  const absl::Status other = CheckJobAccess(bob, JobOf("alice"), "CancelJob");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other.message(), HasSubstr("CancelJob of job j-7: the job belongs to 'alice'"));
  EXPECT_THAT(other.message(), HasSubstr("needs the admin role"));
  EXPECT_THAT(other.message(), HasSubstr("token 'bob' has role submit"));
  EXPECT_EQ(CheckJobAccess(viewer, JobOf("alice"), "CancelJob").code(),
            absl::StatusCode::kPermissionDenied);
  const absl::Status unowned = CheckJobAccess(alice, JobOf(""), "DeleteJob");
  EXPECT_EQ(unowned.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(unowned.message(), HasSubstr("no recorded owner"));
  // The empty name of a submit token never matches an unowned job.
  EXPECT_EQ(CheckJobAccess(rpc::Principal{"", rpc::Role::kSubmit}, JobOf(""), "CancelJob").code(),
            absl::StatusCode::kPermissionDenied);
}

constexpr char kAdmin[] = "ops-token-0123456789abcdef";
constexpr char kAlice[] = "alice-token-0123456789abcdef";
constexpr char kBob[] = "bob-token-0123456789abcdef";
constexpr char kViewer[] = "viewer-token-0123456789abcdef";

mt::v1::JobSpec Spec() { return testutil::ServiceJobSpec("owned"); }

// A coordinator on the test's state directory, with the role tokens or without any.
class OwnershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testutil::MakeTempDir("job_owner");
    std::ofstream f(dir_ + "/tokens");
    f << "admin ops " << kAdmin << "\nsubmit alice " << kAlice << "\nsubmit bob " << kBob
      << "\nread viewer " << kViewer << "\n";
  }
  void TearDown() override { Stop(); }
  void Start(bool with_tokens) {
    Stop();
    CoordinatorConfig config;
    config.listen_address = "127.0.0.1:0";
    config.state_dir = dir_ + "/state";
    if (with_tokens) config.auth_token_file = dir_ + "/tokens";
    config.metrics_port = -1;
    auto server = Server::Create(config, &clock_);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(*server);
  }
  void Stop() {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
  }
  std::unique_ptr<mt::v1::ClientService::Stub> As(const std::string& token) {
    return mt::v1::ClientService::NewStub(rpc::MakeChannel(server_->address(), token));
  }
  std::string Submit(const std::string& token) {
    grpc::ClientContext ctx;
    mt::v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec();
    mt::v1::SubmitJobResponse resp;
    const grpc::Status s = As(token)->SubmitJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job().id();
  }
  grpc::Status Cancel(const std::string& token, const std::string& id, mt::v1::Job* job) {
    grpc::ClientContext ctx;
    mt::v1::CancelJobRequest req;
    req.set_job_id(id);
    return As(token)->CancelJob(&ctx, req, job);
  }
  grpc::Status Delete(const std::string& token, const std::string& id) {
    grpc::ClientContext ctx;
    mt::v1::DeleteJobRequest req;
    req.set_job_id(id);
    mt::v1::Job job;
    return As(token)->DeleteJob(&ctx, req, &job);
  }
  grpc::Status Get(const std::string& token, const std::string& id, mt::v1::Job* job) {
    grpc::ClientContext ctx;
    mt::v1::GetJobRequest req;
    req.set_job_id(id);
    return As(token)->GetJob(&ctx, req, job);
  }

  std::string dir_;
  RealClock clock_;
  std::unique_ptr<Server> server_;
};

TEST_F(OwnershipTest, SubmitTokensActOnTheirOwnJobsAcrossRestarts) {
  Start(/*with_tokens=*/true);
  const std::string alices = Submit(kAlice);
  const std::string bobs = Submit(kBob);
  mt::v1::Job job;
  ASSERT_TRUE(Get(kViewer, alices, &job).ok());  // read sees every job and its owner
  EXPECT_EQ(job.owner(), "alice");
  ASSERT_TRUE(Get(kAlice, bobs, &job).ok());
  EXPECT_EQ(job.owner(), "bob");

  for (const auto& [owner, want] : std::vector<std::pair<std::string, std::string>>{
           {"alice", alices}, {"bob", bobs}, {"nobody", ""}}) {
    grpc::ClientContext ctx;
    mt::v1::ListJobsRequest req;
    req.set_owner(owner);
    mt::v1::ListJobsResponse resp;
    ASSERT_TRUE(As(kViewer)->ListJobs(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.jobs_size(), want.empty() ? 0 : 1) << owner;
    EXPECT_EQ(resp.total_count(), want.empty() ? 0 : 1) << owner;
    if (!want.empty()) {
      EXPECT_EQ(resp.jobs(0).id(), want);
    }
  }

  grpc::Status s = Cancel(kBob, alices, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("belongs to 'alice'"));
  EXPECT_THAT(s.error_message(), HasSubstr("admin role"));
  EXPECT_EQ(Cancel(kViewer, alices, &job).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // The owner is kept in the store: a restarted coordinator enforces it the same way.
  Start(/*with_tokens=*/true);
  ASSERT_TRUE(Get(kViewer, alices, &job).ok());
  EXPECT_EQ(job.owner(), "alice");
  EXPECT_EQ(Cancel(kBob, alices, &job).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Cancel(kAlice, alices, &job).ok());
  EXPECT_EQ(job.state(), mt::v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job.reason(), "cancelled by 'alice'");
  s = Delete(kBob, alices);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("DeleteJob of job " + alices));
  EXPECT_TRUE(Delete(kAlice, alices).ok());
  EXPECT_EQ(Get(kViewer, alices, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  // An admin acts on anyone's job.
  ASSERT_TRUE(Cancel(kAdmin, bobs, &job).ok());
  EXPECT_EQ(job.reason(), "cancelled by 'ops'");
  EXPECT_TRUE(Delete(kAdmin, bobs).ok());
  // Unknown jobs stay NOT_FOUND for a submit token (nothing to own).
  EXPECT_EQ(Cancel(kBob, "j-999", &job).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(OwnershipTest, AJobWithoutAnOwnerIsTheAdminsAlone) {
  Start(/*with_tokens=*/false);
  const std::string id = Submit("");
  mt::v1::Job job;
  ASSERT_TRUE(Get("", id, &job).ok());
  EXPECT_EQ(job.owner(), "");
  Start(/*with_tokens=*/true);
  const grpc::Status s = Cancel(kAlice, id, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("no recorded owner"));
  ASSERT_TRUE(Cancel(kAdmin, id, &job).ok());
  EXPECT_EQ(job.state(), mt::v1::JOB_STATE_CANCELLED);
}

}  // namespace
}  // namespace mt::coordinator
