// mt-worker: the per-GPU (or per CPU slot) daemon (agent.h); flags -> AgentConfig -> Agent ->
// Run, deregistering on SIGTERM/SIGINT. Runs on the main thread only.
//   mt-worker --coordinator HOST:PORT [--gpu N] [--interface IF|CIDR]
//             [--advertise-address ADDR] [--rank-port-range FIRST-LAST]     serve as a worker
//   mt-worker train ARGS                            exec mt-train ARGS (train by hand)
//   mt-worker generate|eval ARGS                    exec mt-train generate|eval ARGS (a
//                                                   checkpoint's text or loss, by hand)
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

#include "absl/flags/flag.h"
#include "common/base/clock.h"
#include "common/base/logging.h"
#include "common/base/version.h"
#include "common/cli/daemon.h"
#include "common/cli/repeated_flag.h"
#include "common/metrics/metrics_security.h"
#include "common/metrics/metrics_server.h"
#include "common/net/interfaces.h"
#include "prometheus/registry.h"
#include "worker/daemon/agent.h"
#include "worker/daemon/worker_metrics.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "Coordinator host:port.");
ABSL_FLAG(std::string, token_file, "", "Bearer token file for a coordinator that requires one.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that the coordinator's certificate must chain to: connect over TLS "
          "(the ranks too).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate for a coordinator that requires one (mutual TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(bool, insecure_allow_plaintext, false,
          "Send the bearer token to a non-loopback coordinator without TLS.");
ABSL_FLAG(std::string, node, "", "Node name (default: this host's name).");
ABSL_FLAG(int, gpu, -1, "GPU index this daemon serves; -1 = a CPU slot.");
ABSL_FLAG(int, cpu_cores, 0, "CPU cores a rank may use (0 = all).");
ABSL_FLAG(std::string, work_dir, "",
          "Directory for the ranks' assignments and trainer logs (default /tmp/mt-worker-PID).");
ABSL_FLAG(std::string, trainer_binary, "",
          "The trainer each rank runs (default: mt-train beside this executable).");
ABSL_FLAG(std::string, state_file, "",
          "File that keeps the worker id across daemon restarts (empty = not kept).");
ABSL_FLAG(int, metrics_port, 0,
          "Port of the Prometheus endpoint (/metrics): 0 = any free port (the coordinator's "
          "service discovery tells Prometheus which), -1 = no metrics.");
ABSL_FLAG(absl::Duration, metrics_linger, absl::Seconds(30),
          "How long an ended rank's series stay on /metrics (so that the last values are "
          "scraped) before they are dropped.");
ABSL_FLAG(std::vector<std::string>, allowed_root, {},
          "Directory that every path of an assigned rank (data, tokenizer, save, load, "
          "TensorBoard, resume) must lie in, symbolic links resolved; repeatable or "
          "comma-separated. A rank with a path outside is not started. The coordinator's own "
          "roots come with each assignment and are checked too; this flag narrows them.");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "Address the Prometheus endpoint binds; 0.0.0.0 for a Prometheus on another machine "
          "(with --metrics-token-file or --metrics-public).");
ABSL_FLAG(std::string, metrics_token_file, "",
          "Token file whose first token every request to /metrics must carry as a bearer token "
          "(Prometheus: authorization.credentials_file); required for a non-loopback "
          "--metrics-host unless --metrics-public.");
ABSL_FLAG(std::string, metrics_tls_cert, "",
          "PEM server certificate (chain) for /metrics over HTTPS (with --metrics-tls-key).");
ABSL_FLAG(std::string, metrics_tls_key, "", "PEM private key of --metrics-tls-cert.");
ABSL_FLAG(bool, metrics_public, false,
          "Allow a non-loopback --metrics-host without --metrics-token-file: /metrics then "
          "answers anyone who reaches it.");
ABSL_FLAG(std::string, interface, "",
          "Network interface the ranks use to talk to other hosts: a name (eth0) or a CIDR "
          "block (10.77.0.0/24, fd00::/64). Default: the interface of the route to the "
          "coordinator. Passed to Gloo and, unless already set, as NCCL_SOCKET_IFNAME and "
          "GLOO_SOCKET_IFNAME.");
ABSL_FLAG(std::string, advertise_address, "",
          "Address other hosts reach this worker's ranks at (NAT, containers). Default: the "
          "address of --interface.");
ABSL_FLAG(std::string, rank_port_range, "",
          "Ports the ranks' collective store may listen on, FIRST-LAST (e.g. 29500-29600, for "
          "firewalls). Default: any free port.");

// `mt-worker train ARGS` runs the trainer (mt-train, beside this executable) in place of this
// process: the daemon itself never loads LibTorch. `mt-worker generate|eval ARGS` run
// `mt-train generate|eval ARGS` the same way (keep_verb).
int ExecTrainer(int argc, char** argv, bool keep_verb) {
  absl::StatusOr<std::string> path = mt::worker::TrainerBesideThisExecutable();
  if (!path.ok()) {
    std::fprintf(stderr, "mt-worker: %s\n", std::string(path.status().message()).c_str());
    return 1;
  }
  std::vector<char*> args = {path->data()};
  for (int i = keep_verb ? 1 : 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(path->c_str(), args.data());
  std::fprintf(stderr,
               "mt-worker %s: cannot run %s: %s (this build has no trainer without LibTorch)\n",
               argv[1], path->c_str(), std::strerror(errno));
  return 1;
}

// The flags as the agent's configuration.
mt::worker::AgentConfig ConfigFromFlags(int argc, char** argv) {
  mt::worker::AgentConfig config;
  config.coordinator = absl::GetFlag(FLAGS_coordinator);
  config.token_file = absl::GetFlag(FLAGS_token_file);
  config.tls = {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert),
                absl::GetFlag(FLAGS_tls_key)};
  config.insecure_allow_plaintext = absl::GetFlag(FLAGS_insecure_allow_plaintext);
  config.node = absl::GetFlag(FLAGS_node);
  config.gpu_index = absl::GetFlag(FLAGS_gpu);
  config.cpu_cores = absl::GetFlag(FLAGS_cpu_cores);
  config.state_file = absl::GetFlag(FLAGS_state_file);
  config.work_dir = absl::GetFlag(FLAGS_work_dir);
  config.trainer_binary = absl::GetFlag(FLAGS_trainer_binary);
  config.allowed_roots = mt::cli::RepeatedFlagValues(argc, argv, "allowed_root");
  return config;
}

// The Prometheus endpoint, as the --metrics-* flags say (metrics_security.h: token, TLS, and
// the exposure rule the coordinator's endpoint follows too).
absl::StatusOr<std::unique_ptr<mt::metrics::MetricsServer>> StartMetrics(
    int port, const std::string& node,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables) {
  mt::metrics::MetricsServerOptions options;
  options.host = absl::GetFlag(FLAGS_metrics_host);
  options.port = port;
  options.advertised_host = node;
  if (absl::Status s = mt::metrics::ApplyMetricsSecurity(
          {absl::GetFlag(FLAGS_metrics_token_file), absl::GetFlag(FLAGS_metrics_tls_cert),
           absl::GetFlag(FLAGS_metrics_tls_key), absl::GetFlag(FLAGS_metrics_public)},
          "/metrics", &options);
      !s.ok()) {
    return s;
  }
  return mt::metrics::MetricsServer::Start(options, std::move(collectables));
}

// Chooses the interface and the advertised address of this worker's ranks (their environment).
absl::StatusOr<std::vector<std::string>> RankNetwork(const std::string& coordinator) {
  absl::StatusOr<mt::net::PortRange> ports =
      mt::net::ParsePortRange(absl::GetFlag(FLAGS_rank_port_range), "--rank-port-range");
  if (!ports.ok()) return ports.status();
  absl::StatusOr<mt::net::NetworkChoice> choice = mt::net::ChooseNetwork(
      coordinator, absl::GetFlag(FLAGS_interface), absl::GetFlag(FLAGS_advertise_address));
  if (!choice.ok()) return choice.status();
  MT_LOG(INFO) << "ranks use interface " << choice->interface << " (" << choice->local_address
               << "), advertised as " << choice->advertise_address;
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) environment.emplace_back(*e);
  return mt::net::RankNetworkEnvironment(*choice, *ports, environment);
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "train") == 0) return ExecTrainer(argc, argv, false);
  if (argc >= 2 && (std::strcmp(argv[1], "generate") == 0 || std::strcmp(argv[1], "eval") == 0)) {
    return ExecTrainer(argc, argv, true);
  }
  mt::cli::ParseFlags(argc, argv,
                      "Runs the training ranks that mt-coordinator assigns to this "
                      "GPU (or CPU slot).\n\n"
                      "  mt-worker --coordinator 127.0.0.1:7070 [--gpu 0]\n"
                      "  mt-worker train --spec job.yaml [--device cuda] ...   (train by hand)\n"
                      "  mt-worker generate CHECKPOINT --prompt TEXT ...       (sample text)\n"
                      "  mt-worker eval CHECKPOINT --data-path PREFIX ...      (loss, perplexity)");
  mt::cli::BlockTerminationSignals();
  mt::worker::AgentConfig config = ConfigFromFlags(argc, argv);
  // Bad flags are named before anything starts (the network choice, the metrics endpoint).
  if (const absl::Status valid = config.Validate(); !valid.ok()) {
    std::fprintf(stderr, "mt-worker: %s\n", std::string(valid.message()).c_str());
    return 2;
  }
  absl::StatusOr<std::vector<std::string>> network = RankNetwork(config.coordinator);
  if (!network.ok()) {
    std::fprintf(stderr, "mt-worker: %s\n", std::string(network.status().message()).c_str());
    return 2;
  }
  config.rank_environment = *std::move(network);
  // Metrics: the registry and the endpoint belong to this process; the agent feeds them.
  mt::RealClock clock;
  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<mt::worker::metrics::WorkerMetrics> metrics;
  std::unique_ptr<mt::metrics::MetricsServer> metrics_server;
  if (const int port = absl::GetFlag(FLAGS_metrics_port); port >= 0) {
    metrics = std::make_unique<mt::worker::metrics::WorkerMetrics>(
        registry.get(), mt::worker::DetectResources(config), mt::kVersion, &clock,
        absl::GetFlag(FLAGS_metrics_linger));
    absl::StatusOr<std::unique_ptr<mt::metrics::MetricsServer>> server =
        StartMetrics(port, config.node, {registry});
    if (!server.ok()) {
      std::fprintf(stderr, "mt-worker: %s\n", std::string(server.status().message()).c_str());
      return 2;
    }
    metrics_server = *std::move(server);
    config.metrics_address = metrics_server->address();
    MT_LOG(INFO) << "metrics on " << metrics_server->Url("/metrics");
  }
  auto agent = mt::worker::Agent::Create(config, metrics.get());
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
