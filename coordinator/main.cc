// mt-coordinator: flags -> CoordinatorConfig -> Validate -> Server::Create -> serve -> drain.
#include <malloc.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/files.h"
#include "common/base/logging.h"
#include "common/cli/daemon.h"
#include "common/cli/repeated_flag.h"
#include "coordinator/server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "host:port to serve gRPC on (port 0 = any free port). Non-loopback addresses "
          "require --auth-token-file and --tls-cert/--tls-key (or --insecure-allow-plaintext).");
ABSL_FLAG(std::string, advertise_address, "",
          "host[:port] that workers and ranks dial, when it differs from --listen (NAT, "
          "containers, a wildcard listen address). No port = the port bound.");
ABSL_FLAG(std::string, state_dir, "",
          "Directory for the coordinator's SQLite database (jobs, events). Required.");
ABSL_FLAG(int, stop_grace_seconds, 10,
          "Seconds a cancelled rank gets between SIGTERM and SIGKILL.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File of accepted bearer tokens, one 'ROLE NAME TOKEN' per line (roles admin, submit, "
          "read, worker; a bare TOKEN is admin). See docs/security.md.");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve gRPC over TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: require every client (workers, mtctl) to present a certificate it "
          "signed (mutual TLS).");
ABSL_FLAG(bool, insecure_allow_plaintext, false,
          "Listen off loopback without TLS: bearer tokens then cross the network in clear text.");
ABSL_FLAG(std::string, reflection, "auto",
          "gRPC server reflection (grpcurl): auto = only when --listen is loopback, on, off.");
ABSL_FLAG(bool, metrics_public, false,
          "Allow a non-loopback --metrics-host without --metrics-token-file: /metrics and /sd "
          "then answer anyone who reaches them.");
ABSL_FLAG(std::string, metrics_token_file, "",
          "Token file whose first token every request to /metrics and /sd must carry as a "
          "bearer token (Prometheus: authorization.credentials_file).");
ABSL_FLAG(std::string, metrics_tls_cert, "",
          "PEM server certificate (chain) for /metrics and /sd over HTTPS (with "
          "--metrics-tls-key).");
ABSL_FLAG(std::string, metrics_tls_key, "", "PEM private key of --metrics-tls-cert.");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1),
          "How often workers are told to heartbeat.");
ABSL_FLAG(absl::Duration, lost_after, absl::Seconds(10),
          "Silence after which a worker is declared lost and its ranks fail over.");
ABSL_FLAG(int, metrics_port, 9400,
          "Port of the Prometheus endpoint: /metrics, and /sd (HTTP service discovery of the "
          "workers' endpoints). 0 = any free port, -1 = off.");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "Address the Prometheus endpoint binds; 0.0.0.0 (with --metrics-token-file or "
          "--metrics-public) for a "
          "Prometheus on another machine.");
ABSL_FLAG(std::vector<std::string>, allowed_root, {},
          "Directory that every path of a job (data, tokenizer, save, load, TensorBoard) and of "
          "a checkpoint import or export must lie in, symbolic links resolved; repeatable or "
          "comma-separated. Required when --listen is not a loopback address.");
ABSL_FLAG(int, keep_ended_jobs, 0,
          "Retention: keep at most this many ended jobs (succeeded, failed, cancelled), deleting "
          "the oldest beyond it; 0 = no count limit. mtctl delete removes one by hand.");
ABSL_FLAG(absl::Duration, ended_job_ttl, absl::ZeroDuration(),
          "Retention: delete ended jobs this long after they ended (e.g. 720h); 0 = keep.");
ABSL_FLAG(std::string, address_file, "",
          "Write the bound host:port to this file once serving (for scripts using port 0).");

namespace {

mt::coordinator::CoordinatorConfig ConfigFromFlags(int argc, char** argv) {
  mt::coordinator::CoordinatorConfig config;
  config.listen_address = absl::GetFlag(FLAGS_listen);
  config.advertise_address = absl::GetFlag(FLAGS_advertise_address);
  config.state_dir = absl::GetFlag(FLAGS_state_dir);
  config.stop_grace_seconds = absl::GetFlag(FLAGS_stop_grace_seconds);
  config.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  config.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  config.lost_after = absl::GetFlag(FLAGS_lost_after);
  config.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  config.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  config.allowed_roots = mt::cli::RepeatedFlagValues(argc, argv, "allowed_root");
  config.tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                absl::GetFlag(FLAGS_tls_client_ca)};
  config.insecure_allow_plaintext = absl::GetFlag(FLAGS_insecure_allow_plaintext);
  config.reflection = absl::GetFlag(FLAGS_reflection);
  config.metrics_public = absl::GetFlag(FLAGS_metrics_public);
  config.metrics_token_file = absl::GetFlag(FLAGS_metrics_token_file);
  config.metrics_tls_cert = absl::GetFlag(FLAGS_metrics_tls_cert);
  config.metrics_tls_key = absl::GetFlag(FLAGS_metrics_tls_key);
  config.keep_ended_jobs = absl::GetFlag(FLAGS_keep_ended_jobs);
  config.ended_job_ttl = absl::GetFlag(FLAGS_ended_job_ttl);
  return config;
}

// glibc raises its mmap threshold to the largest block freed (up to 32 MiB) and then keeps up to
// twice that in the heap after a free. The coordinator's few large blocks (8 MiB read buffers
// hashing a checkpoint's files when a job restarts, gRPC message buffers) would then stay
// resident for good: a one-off RSS step of ~10 MiB (+35% of an idle coordinator) that is no
// leak but reads as one (issue 19's chaos soak). A fixed threshold (which also fixes the trim
// threshold) keeps large blocks in mmap, returned on free, so RSS follows live memory; the
// control plane allocates such blocks rarely enough that the mmap cost does not show.
// glibc also gives threads arenas of their own, up to eight per core (15 on a 2-core machine
// in the soak): what a gRPC or store thread frees stays in its arena, and the coordinator's
// anonymous memory swung by ~1.5 MiB (5% of it) as jobs and connections came and went, with no
// trend (tests/chaos/README.md). Two arenas bound that; the control plane's threads contend
// little for the allocator.
void BoundMallocRetention() {
  constexpr int kMmapThresholdBytes = 128 << 10;  // glibc's starting value
  if (mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) != 1) {
    MT_LOG(WARNING) << "mallopt(M_MMAP_THRESHOLD) failed; large freed blocks may stay resident";
  }
  constexpr int kArenas = 2;
  if (mallopt(M_ARENA_MAX, kArenas) != 1) {
    MT_LOG(WARNING) << "mallopt(M_ARENA_MAX) failed; each thread may keep an arena of its own";
  }
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "mt-coordinator: %s\n", std::string(status.message()).c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  mt::cli::ParseFlags(
      argc, argv,
      "The mt control plane: keeps jobs and workers, plans "
      "TP/PP/DP layouts and places ranks on mt-worker daemons.\n\n"
      "  mt-coordinator --state-dir DIR [--listen 127.0.0.1:7070] [--auth-token-file FILE]\n"
      "                 [--allowed-root DIR]...\n"
      "                 [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]");
  const mt::coordinator::CoordinatorConfig config = ConfigFromFlags(argc, argv);
  if (absl::Status valid = config.Validate(); !valid.ok()) return Fail(valid);

  BoundMallocRetention();
  mt::cli::BlockTerminationSignals();
  mt::RealClock clock;
  auto server = mt::coordinator::Server::Create(config, &clock);
  if (!server.ok()) return Fail(server.status());
  mt::coordinator::Server* raw = server->get();
  mt::cli::OnTerminationSignal([raw](int sig) {
    MT_LOG(INFO) << "signal " << sig << ": draining";
    raw->Shutdown();
  });
  if (const std::string path = absl::GetFlag(FLAGS_address_file); !path.empty()) {
    if (absl::Status s = mt::WriteFileAtomically(path, raw->address() + "\n"); !s.ok()) {
      MT_LOG(ERROR) << "--address_file: " << s;
    }
  }
  raw->Wait();
  MT_LOG(INFO) << "mt-coordinator stopped";
  return 0;
}
