// The agent's exit reports against a real gRPC server playing a coordinator that has just
// restarted: it refuses a rank's exit (NOT_FOUND) for a while, then takes it. The report must
// get through (before: the first refusal dropped it, and the job's orphan check failed it).
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/rpc/auth.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mt/v1/worker_service.grpc.pb.h"
#include "tests/testutil/subprocess.h"
#include "worker/daemon/agent.h"

namespace mt::worker {
namespace {

// Answers a daemon: registers it, sends it one assignment, and answers its rank's exit
// report with NOT_FOUND until `accept_from`.
class RestartedCoordinator final : public mt::v1::WorkerService::Service {
 public:
  explicit RestartedCoordinator(absl::Time accept_from) : accept_from_(accept_from) {}

  grpc::Status Register(grpc::ServerContext*, const mt::v1::RegisterRequest*,
                        mt::v1::RegisterResponse* response) override {
    response->set_worker_id("w-1");
    response->mutable_heartbeat_interval()->set_nanos(100'000'000);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const mt::v1::HeartbeatRequest*,
                         mt::v1::HeartbeatResponse* response) override {
    response->set_known(true);
    return grpc::Status::OK;
  }
  grpc::Status StreamAssignments(grpc::ServerContext* context,
                                 const mt::v1::StreamAssignmentsRequest*,
                                 grpc::ServerWriter<mt::v1::WorkerCommand>* writer) override {
    mt::v1::WorkerCommand command;
    mt::v1::Assignment* a = command.mutable_assign();
    a->set_job_id("j-1");
    a->mutable_coordinates()->set_rank(0);
    a->set_gpu_index(-1);
    writer->Write(command);
    while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(20));
    return grpc::Status::OK;
  }
  grpc::Status ReportProgress(grpc::ServerContext*, grpc::ServerReader<mt::v1::RankReport>* reader,
                              mt::v1::ReportProgressResponse*) override {
    mt::v1::RankReport report;
    while (reader->Read(&report)) {
    }
    return grpc::Status::OK;
  }
  grpc::Status ReportRankExit(grpc::ServerContext*, const mt::v1::RankExitReport* report,
                              mt::v1::RankExitResponse*) override {
    absl::MutexLock lock(&mu_);
    if (absl::Now() < accept_from_) {
      ++refused_;
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "worker w-1 is not registered");
    }
    accepted_.push_back(report->job_id());
    return grpc::Status::OK;
  }
  grpc::Status Deregister(grpc::ServerContext*, const mt::v1::DeregisterRequest*,
                          mt::v1::DeregisterResponse*) override {
    return grpc::Status::OK;
  }

  int refused() {
    absl::MutexLock lock(&mu_);
    return refused_;
  }
  std::vector<std::string> accepted() {
    absl::MutexLock lock(&mu_);
    return accepted_;
  }

 private:
  const absl::Time accept_from_;
  absl::Mutex mu_;
  int refused_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> accepted_ ABSL_GUARDED_BY(mu_);
};

TEST(AgentExitReportTest, ARefusalByARestartingCoordinatorIsRetriedUntilItTakesTheReport) {
  const std::string dir = testutil::MakeTempDir("agent_exit");
  const std::string trainer = dir + "/trainer.sh";
  std::ofstream(trainer) << "#!/bin/sh\nexit 0\n";
  ::chmod(trainer.c_str(), 0755);
  // Refused for 2 s (less than the refusal grace), then taken.
  RestartedCoordinator service(absl::Now() + absl::Seconds(2));
  grpc::ServerBuilder builder;
  rpc::AllowKeepalivePings(&builder);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  AgentConfig config;
  config.coordinator = absl::StrCat("127.0.0.1:", port);
  config.trainer_binary = trainer;
  config.work_dir = dir + "/work";
  auto agent = Agent::Create(config);
  ASSERT_TRUE(agent.ok()) << agent.status();
  std::thread run([&] { (void)(*agent)->Run(); });
  const bool taken =
      testutil::WaitFor([&] { return !service.accepted().empty(); }, absl::Seconds(15));
  (*agent)->Shutdown();
  run.join();
  server->Shutdown();
  EXPECT_TRUE(taken);
  EXPECT_GE(service.refused(), 1);
  EXPECT_EQ(service.accepted(), std::vector<std::string>{"j-1"});
}

// Sends a daemon the same assignment twice, the second time once the rank has ended (as a
// coordinator that re-sends an assignment it believes lost does) and counts the exit reports.
class ResendingCoordinator final : public mt::v1::WorkerService::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const mt::v1::RegisterRequest*,
                        mt::v1::RegisterResponse* response) override {
    response->set_worker_id("w-1");
    response->mutable_heartbeat_interval()->set_nanos(100'000'000);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const mt::v1::HeartbeatRequest*,
                         mt::v1::HeartbeatResponse* response) override {
    response->set_known(true);
    return grpc::Status::OK;
  }
  grpc::Status StreamAssignments(grpc::ServerContext* context,
                                 const mt::v1::StreamAssignmentsRequest*,
                                 grpc::ServerWriter<mt::v1::WorkerCommand>* writer) override {
    mt::v1::WorkerCommand command;
    mt::v1::Assignment* a = command.mutable_assign();
    a->set_job_id("j-1");
    a->set_attempt(2);
    a->mutable_coordinates()->set_rank(0);
    a->set_gpu_index(-1);
    writer->Write(command);
    // Once the rank has ended (its exit reported, its process reaped), the same assignment.
    const absl::Time end = absl::Now() + absl::Seconds(10);
    while (exits() == 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(20));
    absl::SleepFor(absl::Milliseconds(500));  // the daemon reaps it (every 100 ms heartbeat)
    writer->Write(command);
    while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(20));
    return grpc::Status::OK;
  }
  grpc::Status ReportProgress(grpc::ServerContext*, grpc::ServerReader<mt::v1::RankReport>* reader,
                              mt::v1::ReportProgressResponse*) override {
    mt::v1::RankReport report;
    while (reader->Read(&report)) {
    }
    return grpc::Status::OK;
  }
  grpc::Status ReportRankExit(grpc::ServerContext*, const mt::v1::RankExitReport*,
                              mt::v1::RankExitResponse*) override {
    absl::MutexLock lock(&mu_);
    ++exits_;
    return grpc::Status::OK;
  }
  grpc::Status Deregister(grpc::ServerContext*, const mt::v1::DeregisterRequest*,
                          mt::v1::DeregisterResponse*) override {
    return grpc::Status::OK;
  }
  int exits() {
    absl::MutexLock lock(&mu_);
    return exits_;
  }

 private:
  absl::Mutex mu_;
  int exits_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(AgentExitReportTest, AnAssignmentOfAnAttemptThatAlreadyRanHereIsNotStartedAgain) {
  const std::string dir = testutil::MakeTempDir("agent_resent");
  const std::string trainer = dir + "/trainer.sh";
  std::ofstream(trainer) << "#!/bin/sh\necho started >> " << dir << "/starts\nexit 0\n";
  ::chmod(trainer.c_str(), 0755);
  ResendingCoordinator service;
  grpc::ServerBuilder builder;
  rpc::AllowKeepalivePings(&builder);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  AgentConfig config;
  config.coordinator = absl::StrCat("127.0.0.1:", port);
  config.trainer_binary = trainer;
  config.work_dir = dir + "/work";
  auto agent = Agent::Create(config);
  ASSERT_TRUE(agent.ok()) << agent.status();
  std::thread run([&] { (void)(*agent)->Run(); });
  ASSERT_TRUE(testutil::WaitFor([&] { return service.exits() >= 1; }, absl::Seconds(15)));
  // Time for a second start (a shell that exits at once) and its exit report, had there been one.
  absl::SleepFor(absl::Seconds(2));
  (*agent)->Shutdown();
  run.join();
  server->Shutdown();
  EXPECT_EQ(service.exits(), 1);
  std::ifstream starts(dir + "/starts");
  int lines = 0;
  for (std::string line; std::getline(starts, line);) ++lines;
  EXPECT_EQ(lines, 1) << "the re-sent assignment started the rank again";
}

}  // namespace
}  // namespace mt::worker
