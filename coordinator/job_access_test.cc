// Job ownership (issue #20): the rule on its own, then through a real in-process coordinator
// with role tokens, across restarts of it on the same state directory: a submit token cancels
// and deletes only its own jobs, an admin any, a read token reads every job; a job from a
// coordinator without tokens has no owner and is the admins' alone.
#include "coordinator/job_access.h"

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/clock.h"
#include "common/base/paths.h"
#include "coordinator/server.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mt/v1/client_service.grpc.pb.h"
#include "tests/testutil/service_spec.h"
#include "tests/testutil/subprocess.h"
#include "tests/testutil/test_checkpoint.h"

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

TEST(JobAccess, CheckpointsFollowTheirJob) {
  const rpc::Principal alice{"alice", rpc::Role::kSubmit};
  const rpc::Principal bob{"bob", rpc::Role::kSubmit};
  const rpc::Principal ops{"ops", rpc::Role::kAdmin};
  mt::v1::Checkpoint c;
  c.set_id("c-3");
  c.set_job_id("j-7");
  const mt::v1::Job job = JobOf("alice");
  EXPECT_TRUE(CheckCheckpointAccess(alice, c, &job, "DeleteCheckpoint").ok());
  EXPECT_TRUE(CheckCheckpointAccess(ops, c, &job, "DeleteCheckpoint").ok());
  EXPECT_TRUE(CheckCheckpointAccess(ops, c, nullptr, "ExportCheckpoint").ok());
  absl::Status s = CheckCheckpointAccess(bob, c, &job, "ExportCheckpoint");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(
      s.message(),
      HasSubstr("ExportCheckpoint of checkpoint c-3 of job j-7: the job belongs to 'alice'"));
  s = CheckCheckpointAccess(alice, c, nullptr, "DeleteCheckpoint");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("its job j-7 no longer exists"));
  c.clear_job_id();
  s = CheckCheckpointAccess(alice, c, nullptr, "DeleteCheckpoint");
  EXPECT_THAT(s.message(), HasSubstr("imported without a job"));
  EXPECT_THAT(s.message(), HasSubstr("token 'alice' has role submit"));
  const rpc::Principal viewer{"alice", rpc::Role::kRead};
  EXPECT_EQ(CheckCheckpointAccess(viewer, c, &job, "DeleteCheckpoint").code(),
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

  // ImportCheckpoint of an mt checkpoint written at `save_dir`/iter_<step>, filed under `job_id`.
  grpc::Status Import(const std::string& token, const std::string& save_dir, int64_t step,
                      const std::string& job_id, mt::v1::Checkpoint* checkpoint) {
    grpc::ClientContext ctx;
    mt::v1::ImportCheckpointRequest req;
    req.set_directory(testutil::WriteTestCheckpoint(save_dir, "j-0", step, std::nan(""),
                                                    /*commit=*/true, /*real_shard=*/true));
    req.set_job_id(job_id);
    return As(token)->ImportCheckpoint(&ctx, req, checkpoint);
  }
  std::string ImportForAdmin(const std::string& save_dir, int64_t step, const std::string& job_id) {
    mt::v1::Checkpoint c;
    const grpc::Status s = Import(kAdmin, save_dir, step, job_id, &c);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return c.id();
  }
  grpc::Status GetCheckpoint(const std::string& token, const std::string& id,
                             mt::v1::Checkpoint* c) {
    grpc::ClientContext ctx;
    mt::v1::GetCheckpointRequest req;
    req.set_checkpoint_id(id);
    return As(token)->GetCheckpoint(&ctx, req, c);
  }
  grpc::Status DeleteCheckpoint(const std::string& token, const std::string& id) {
    grpc::ClientContext ctx;
    mt::v1::DeleteCheckpointRequest req;
    req.set_checkpoint_id(id);
    mt::v1::Checkpoint c;
    return As(token)->DeleteCheckpoint(&ctx, req, &c);
  }
  grpc::Status ExportCheckpoint(const std::string& token, const std::string& id,
                                const std::string& out) {
    grpc::ClientContext ctx;
    mt::v1::ExportCheckpointRequest req;
    req.set_checkpoint_id(id);
    req.set_output_dir(out);
    mt::v1::ExportCheckpointResponse resp;
    return As(token)->ExportCheckpoint(&ctx, req, &resp);
  }
  grpc::Status VerifyCheckpoint(const std::string& token, const std::string& id) {
    grpc::ClientContext ctx;
    mt::v1::VerifyCheckpointRequest req;
    req.set_checkpoint_id(id);
    mt::v1::VerifyCheckpointResponse resp;
    const grpc::Status s = As(token)->VerifyCheckpoint(&ctx, req, &resp);
    if (s.ok()) {
      EXPECT_TRUE(resp.ok()) << id;
    }
    return s;
  }
  // The bytes of every chunk DownloadCheckpoint sends.
  grpc::Status Download(const std::string& token, const std::string& id, int64_t* bytes) {
    grpc::ClientContext ctx;
    mt::v1::DownloadCheckpointRequest req;
    req.set_checkpoint_id(id);
    auto reader = As(token)->DownloadCheckpoint(&ctx, req);
    mt::v1::DownloadCheckpointChunk chunk;
    *bytes = 0;
    while (reader->Read(&chunk)) *bytes += static_cast<int64_t>(chunk.data().size());
    return reader->Finish();
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

// Checkpoints follow their job's owner: a submit token deletes and exports only the checkpoints
// of its own jobs; every role that may read lists and reads them all, and every submit token may
// verify and download any (docs/security.md says why); an admin acts on all; a checkpoint that
// has no job (imported alone, or its job deleted) is the admins' alone, like an unowned job.
// Before: DeleteCheckpoint and ExportCheckpoint were the admins' only, whoever owned the job.
TEST_F(OwnershipTest, CheckpointsFollowTheirJobsOwner) {
  Start(/*with_tokens=*/true);
  const std::string alices = Submit(kAlice);
  const std::string bobs = Submit(kBob);
  const std::string a1 = ImportForAdmin(dir_ + "/a", 3, alices);
  const std::string a2 = ImportForAdmin(dir_ + "/a", 4, alices);
  const std::string b1 = ImportForAdmin(dir_ + "/b", 5, bobs);
  const std::string loose = ImportForAdmin(dir_ + "/loose", 6, "");
  ASSERT_FALSE(a1.empty() || a2.empty() || b1.empty() || loose.empty());

  // Importing registers a directory of the coordinator's file system: the admins' only.
  mt::v1::Checkpoint c;
  grpc::Status s = Import(kAlice, dir_ + "/a", 7, alices, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("ImportCheckpoint needs the admin role"));

  // Reading, verifying and downloading another's checkpoint.
  ASSERT_TRUE(GetCheckpoint(kViewer, a1, &c).ok());
  EXPECT_EQ(c.job_id(), alices);
  EXPECT_TRUE(VerifyCheckpoint(kBob, a1).ok());
  int64_t bytes = 0;
  s = Download(kBob, a1, &bytes);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(bytes, 5000);
  EXPECT_EQ(VerifyCheckpoint(kViewer, a1).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Deleting or exporting another's: refused, naming the checkpoint, its job and its owner;
  // nothing is touched.
  s = DeleteCheckpoint(kBob, a1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("DeleteCheckpoint of checkpoint " + a1 + " of job " +
                                           alices + ": the job belongs to 'alice'"));
  EXPECT_THAT(s.error_message(), HasSubstr("token 'bob' has role submit"));
  s = ExportCheckpoint(kBob, a1, dir_ + "/out-bob");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("ExportCheckpoint of checkpoint " + a1));
  EXPECT_FALSE(PathExists(dir_ + "/out-bob"));
  s = DeleteCheckpoint(kViewer, a1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("DeleteCheckpoint needs the submit role"));
  ASSERT_TRUE(GetCheckpoint(kViewer, a1, &c).ok());
  EXPECT_EQ(c.state(), mt::v1::CHECKPOINT_STATE_VERIFIED);
  // A checkpoint without a job: the admins' alone.
  s = DeleteCheckpoint(kAlice, loose);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("imported without a job"));
  // Unknown checkpoints stay NOT_FOUND for a submit token (nothing to own).
  EXPECT_EQ(DeleteCheckpoint(kBob, "c-999").error_code(), grpc::StatusCode::NOT_FOUND);

  // The owner deletes her own, and her export passes the check (this test checkpoint holds no
  // GPT weights, so the conversion itself then fails, on its own terms).
  s = DeleteCheckpoint(kAlice, a1);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(GetCheckpoint(kViewer, a1, &c).ok());
  EXPECT_EQ(c.state(), mt::v1::CHECKPOINT_STATE_DELETED);
  s = ExportCheckpoint(kAlice, a2, dir_ + "/out-alice");
  EXPECT_NE(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("belongs to")));

  // Across a restart the rule holds; once her job is deleted, its checkpoints are no one's.
  Start(/*with_tokens=*/true);
  EXPECT_EQ(DeleteCheckpoint(kBob, a2).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  mt::v1::Job job;
  ASSERT_TRUE(Cancel(kAlice, alices, &job).ok());
  ASSERT_TRUE(Delete(kAlice, alices).ok());
  s = DeleteCheckpoint(kAlice, a2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("its job " + alices + " no longer exists"));
  // An admin deletes anyone's.
  EXPECT_TRUE(DeleteCheckpoint(kAdmin, a2).ok());
  EXPECT_TRUE(DeleteCheckpoint(kAdmin, b1).ok());
  EXPECT_TRUE(DeleteCheckpoint(kAdmin, loose).ok());
}

}  // namespace
}  // namespace mt::coordinator
