// Every role against every RPC of both coordinator services, on a real in-process Server: the
// refused pairs answer PERMISSION_DENIED, the allowed ones are not refused for auth reasons
// (they may still fail on their empty request). Also: the role table covers every method.
#include "coordinator/rpc_roles.h"

#include <fstream>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/rpc/auth.h"
#include "coordinator/server.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "mt/v1/client_service.grpc.pb.h"
#include "mt/v1/worker_service.grpc.pb.h"
#include "tests/testutil/raw_call.h"
#include "tests/testutil/subprocess.h"

namespace mt::coordinator {
namespace {

struct RoleToken {
  rpc::Role role;
  std::string token;
};

const RoleToken kTokens[] = {
    {rpc::Role::kAdmin, "admin-token-0123456789abcdef"},
    {rpc::Role::kSubmit, "submit-token-0123456789abcdef"},
    {rpc::Role::kRead, "read-token-0123456789abcdef"},
    {rpc::Role::kWorker, "worker-token-0123456789abcdef"},
};

// The full names ("/mt.v1.ClientService/GetJob") of every method of both services.
std::vector<const google::protobuf::MethodDescriptor*> AllMethods() {
  std::vector<const google::protobuf::MethodDescriptor*> methods;
  for (const char* service :
       {mt::v1::ClientService::service_full_name(), mt::v1::WorkerService::service_full_name()}) {
    const auto* d = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
    EXPECT_NE(d, nullptr) << service;
    if (d == nullptr) continue;
    for (int i = 0; i < d->method_count(); ++i) methods.push_back(d->method(i));
  }
  return methods;
}

// One call of `method` with an empty request message as the holder of `token`.
grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& token) {
  return testutil::RawCall(channel, method, "", {{"authorization", "Bearer " + token}}).status;
}

TEST(RpcRoles, TableCoversEveryMethodOnce) {
  std::set<std::string> names;
  for (const auto* m : AllMethods()) {
    EXPECT_TRUE(names.insert(m->name()).second) << m->name() << " is in both services";
  }
  std::set<std::string> table;
  for (const auto& [name, access] : RpcAccessTable()) {
    EXPECT_TRUE(table.insert(std::string(name)).second) << name << " listed twice";
    EXPECT_EQ(names.count(std::string(name)), 1u) << name << " is no RPC of either service";
  }
  EXPECT_EQ(table, names);
  EXPECT_EQ(RequiredAccess("NoSuchMethod"), rpc::Access::kAdmin);
}

TEST(RpcRoles, EveryRoleAgainstEveryRpc) {
  const std::string dir = testutil::MakeTempDir("rpc_roles");
  {
    std::ofstream f(dir + "/tokens");
    for (const RoleToken& t : kTokens) f << rpc::RoleName(t.role) << " " << t.token << "\n";
  }
  CoordinatorConfig config;
  config.listen_address = "127.0.0.1:0";
  config.state_dir = dir + "/state";
  config.auth_token_file = dir + "/tokens";
  config.metrics_port = -1;
  RealClock clock;
  auto server = Server::Create(config, &clock);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const std::shared_ptr<grpc::Channel> channel = rpc::MakeChannel((*server)->address(), "");
  int refused = 0, allowed = 0;
  for (const auto* m : AllMethods()) {
    const std::string method = absl::StrCat("/", m->service()->full_name(), "/", m->name());
    const rpc::Access access = RequiredAccess(m->name());
    for (const RoleToken& t : kTokens) {
      const grpc::Status s = RawCall(channel, method, t.token);
      const std::string what = absl::StrCat(method, " as ", rpc::RoleName(t.role), ": ",
                                            s.error_code(), " ", s.error_message());
      EXPECT_NE(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << what;
      if (rpc::Allows(t.role, access)) {
        ++allowed;
        EXPECT_NE(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << what;
      } else {
        ++refused;
        EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << what;
        EXPECT_NE(s.error_message().find(m->name()), std::string::npos) << what;
      }
    }
    // An unknown token is refused before any role is looked at.
    EXPECT_EQ(RawCall(channel, method, "nobody-token-0123456789abcdef").error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << method;
  }
  // 28 methods x 4 roles; admin everywhere, worker on the worker service only.
  EXPECT_EQ(refused + allowed, 4 * static_cast<int>(AllMethods().size()));
  EXPECT_GT(refused, 40);
  (*server)->Shutdown();
}

// Load balancers probe without a token: grpc.health.v1 answers SERVING while every other
// service wants one.
TEST(RpcRoles, HealthStaysOpen) {
  const std::string dir = testutil::MakeTempDir("rpc_roles_health");
  std::ofstream(dir + "/tokens") << "admin ops " << kTokens[0].token << "\n";
  CoordinatorConfig config;
  config.listen_address = "127.0.0.1:0";
  config.state_dir = dir + "/state";
  config.auth_token_file = dir + "/tokens";
  config.metrics_port = -1;
  RealClock clock;
  auto server = Server::Create(config, &clock);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const std::shared_ptr<grpc::Channel> channel = rpc::MakeChannel((*server)->address(), "");
  const testutil::RawCallResult health =
      testutil::RawCall(channel, "/grpc.health.v1.Health/Check", "");
  ASSERT_TRUE(health.status.ok()) << health.status.error_message();
  EXPECT_EQ(health.response, std::string("\x08\x01", 2));  // {status: SERVING}
  EXPECT_EQ(
      testutil::RawCall(channel, "/mt.v1.ClientService/GetClusterInfo", "").status.error_code(),
      grpc::StatusCode::UNAUTHENTICATED);
  (*server)->Shutdown();
}

// Evaluation and generation jobs are jobs: a read token cannot start one, a submit token can.
TEST(RpcRoles, EvalAndGenerateNeedSubmit) {
  for (const char* method : {"EvaluateCheckpoint", "GenerateText"}) {
    EXPECT_EQ(RequiredAccess(method), rpc::Access::kSubmit) << method;
    EXPECT_FALSE(rpc::Allows(rpc::Role::kRead, RequiredAccess(method))) << method;
    EXPECT_FALSE(rpc::Allows(rpc::Role::kWorker, RequiredAccess(method))) << method;
    EXPECT_TRUE(rpc::Allows(rpc::Role::kSubmit, RequiredAccess(method))) << method;
  }
}

TEST(RpcRoles, AllowsMatrix) {
  using rpc::Access;
  using rpc::Role;
  // Rows: admin, submit, read, worker; columns: read, submit, admin, worker.
  const Role roles[] = {Role::kAdmin, Role::kSubmit, Role::kRead, Role::kWorker};
  const Access accesses[] = {Access::kRead, Access::kSubmit, Access::kAdmin, Access::kWorker};
  const bool want[4][4] = {{true, true, true, true},
                           {true, true, false, false},
                           {true, false, false, false},
                           {false, false, false, true}};
  for (int r = 0; r < 4; ++r) {
    for (int a = 0; a < 4; ++a) {
      EXPECT_EQ(rpc::Allows(roles[r], accesses[a]), want[r][a])
          << rpc::RoleName(roles[r]) << " on " << rpc::AccessName(accesses[a]);
    }
  }
}

}  // namespace
}  // namespace mt::coordinator
