// mt-worker: the per-GPU (or per CPU slot) daemon.
//   mt-worker --coordinator HOST:PORT [--gpu N]     serve as a worker
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/base/logging.h"
#include "common/cli/daemon.h"
#include "worker/agent/agent.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "Coordinator host:port.");
ABSL_FLAG(std::string, token_file, "", "Bearer token file for a coordinator that requires one.");
ABSL_FLAG(std::string, node, "", "Node name (default: this host's name).");
ABSL_FLAG(int, gpu, -1, "GPU index this daemon serves; -1 = a CPU slot.");
ABSL_FLAG(int, cpu_cores, 0, "CPU cores a rank may use (0 = all).");
ABSL_FLAG(std::string, work_dir, "",
          "Directory for the ranks' assignments and trainer logs (default /tmp/mt-worker-PID).");
ABSL_FLAG(std::string, trainer_binary, "",
          "The trainer each rank runs (default: mt-train beside this executable).");
ABSL_FLAG(std::string, state_file, "",
          "File that keeps the worker id across daemon restarts (empty = not kept).");

// `mt-worker train ARGS` runs the trainer (mt-train, beside this executable) in place of this
// process: the daemon itself never loads LibTorch.
int ExecTrainer(int argc, char** argv) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::fprintf(stderr, "mt-worker: cannot find this executable\n");
    return 1;
  }
  std::string path(self, static_cast<size_t>(n));
  path = path.substr(0, path.rfind('/')) + "/mt-train";
  std::vector<char*> args = {path.data()};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(path.c_str(), args.data());
  std::fprintf(stderr,
               "mt-worker train: cannot run %s: %s (this build has no trainer without LibTorch)\n",
               path.c_str(), std::strerror(errno));
  return 1;
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "train") == 0) return ExecTrainer(argc, argv);
  mt::cli::ParseFlags(argc, argv,
                      "Runs the training ranks that mt-coordinator assigns to this "
                      "GPU (or CPU slot).\n\n"
                      "  mt-worker --coordinator 127.0.0.1:7070 [--gpu 0]\n"
                      "  mt-worker train --spec job.yaml [--device cuda] ...   (train by hand)");
  mt::cli::BlockTerminationSignals();
  mt::worker::AgentConfig config;
  config.coordinator = absl::GetFlag(FLAGS_coordinator);
  config.token_file = absl::GetFlag(FLAGS_token_file);
  config.node = absl::GetFlag(FLAGS_node);
  config.gpu_index = absl::GetFlag(FLAGS_gpu);
  config.cpu_cores = absl::GetFlag(FLAGS_cpu_cores);
  config.state_file = absl::GetFlag(FLAGS_state_file);
  config.work_dir = absl::GetFlag(FLAGS_work_dir);
  config.trainer_binary = absl::GetFlag(FLAGS_trainer_binary);
  auto agent = mt::worker::Agent::Create(config);
  if (!agent.ok()) {
    std::fprintf(stderr, "mt-worker: %s\n", std::string(agent.status().message()).c_str());
    return 2;
  }
  mt::worker::Agent* raw = agent->get();
  mt::cli::OnTerminationSignal([raw](int sig) {
    MT_LOG(INFO) << "signal " << sig << ": deregistering";
    raw->Shutdown();
  });
  absl::Status s = raw->Run();
  if (!s.ok()) {
    std::fprintf(stderr, "mt-worker: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
