// The agent's configuration: what Validate rejects, what Create resolves, and the resources it
// reports for a slot. (Its conversation with a coordinator is tested across processes in
// tests/integration.)
#include "worker/daemon/agent.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::worker {
namespace {

using ::testing::HasSubstr;

TEST(AgentConfigTest, DefaultsAreValid) { EXPECT_TRUE(AgentConfig().Validate().ok()); }

TEST(AgentConfigTest, RejectsBadValuesByFlagName) {
  struct Case {
    void (*edit)(AgentConfig*);
    const char* flag;
  };
  const Case cases[] = {
      {[](AgentConfig* c) { c->coordinator = "localhost"; }, "--coordinator"},
      {[](AgentConfig* c) { c->gpu_index = -2; }, "--gpu"},
      {[](AgentConfig* c) { c->gpu_index = 1024; }, "--gpu"},
      {[](AgentConfig* c) { c->cpu_cores = -1; }, "--cpu-cores"},
      {[](AgentConfig* c) { c->cpu_cores = 4097; }, "--cpu-cores"},
  };
  for (const Case& c : cases) {
    AgentConfig config;
    c.edit(&config);
    const absl::Status s = config.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.flag;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.flag));
  }
}

TEST(AgentTest, CreateRejectsAnInvalidConfigAndAMissingTokenFile) {
  AgentConfig config;
  config.gpu_index = -5;
  EXPECT_EQ(Agent::Create(config).status().code(), absl::StatusCode::kInvalidArgument);
  config = AgentConfig();
  config.token_file = testutil::MakeTempDir("agent") + "/no-token";
  const absl::Status s = Agent::Create(config).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("--token-file"));
}

TEST(AgentTest, CreateKeepsTheWorkerIdOfItsStateFile) {
  const std::string dir = testutil::MakeTempDir("agent");
  AgentConfig config;
  config.state_file = dir + "/id";
  config.trainer_binary = "/bin/true";
  config.work_dir = dir;
  {
    auto agent = Agent::Create(config);
    ASSERT_TRUE(agent.ok()) << agent.status();
    EXPECT_EQ((*agent)->worker_id(), "");  // not registered yet, no state
  }
  FILE* f = std::fopen(config.state_file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("w-42\n", f);
  std::fclose(f);
  auto agent = Agent::Create(config);
  ASSERT_TRUE(agent.ok()) << agent.status();
  EXPECT_EQ((*agent)->worker_id(), "w-42");
  EXPECT_TRUE((*agent)->Running().empty());
}

TEST(DetectResourcesTest, CpuSlotAndGpuSlot) {
  AgentConfig config;
  config.node = "node-a";
  config.cpu_cores = 3;
  mt::v1::WorkerResources cpu = DetectResources(config);
  EXPECT_EQ(cpu.node(), "node-a");
  EXPECT_EQ(cpu.gpu_index(), -1);
  EXPECT_EQ(cpu.device_name(), "cpu");
  EXPECT_EQ(cpu.cpu_cores(), 3);
  EXPECT_GT(cpu.memory_bytes(), 0);
  config.gpu_index = 2;
  config.cpu_cores = 0;
  mt::v1::WorkerResources gpu = DetectResources(config);
  EXPECT_EQ(gpu.device_name(), "cuda:2");  // the daemon never starts CUDA to ask
  EXPECT_GE(gpu.cpu_cores(), 1);
  config.node.clear();
  EXPECT_FALSE(DetectResources(config).node().empty());  // this host's name
}

TEST(RankEnvironmentTest, ACpuSlotBoundsLibTorchAndOpenBlasToItsCores) {
  AgentConfig config;
  config.token_file = "/etc/mt/token";
  config.rank_environment = {"MT_ADVERTISE_HOST=10.0.0.2"};
  mt::v1::WorkerResources cpu;
  cpu.set_gpu_index(-1);
  cpu.set_cpu_cores(3);
  EXPECT_THAT(RankEnvironment(config, cpu),
              ::testing::ElementsAre("MT_TOKEN_FILE=/etc/mt/token", "MT_CPU_THREADS=3",
                                     "OPENBLAS_NUM_THREADS=3", "MT_ADVERTISE_HOST=10.0.0.2"));
  mt::v1::WorkerResources gpu;
  gpu.set_gpu_index(1);
  gpu.set_cpu_cores(8);
  // A GPU rank's threads are LibTorch's defaults; the explicit variables come last.
  EXPECT_THAT(RankEnvironment(config, gpu),
              ::testing::ElementsAre("MT_TOKEN_FILE=/etc/mt/token", "MT_ADVERTISE_HOST=10.0.0.2"));
}

}  // namespace
}  // namespace mt::worker
