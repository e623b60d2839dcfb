// mt-chaos-soak: flags -> SoakConfig -> RunSoak -> the report on stdout (tests/chaos/README.md).
// Exit codes: 0 every invariant held, 1 a violation or a failed set-up, 2 a bad flag, 77 cannot
// run here (no root or no network namespaces: ctest's SKIP_RETURN_CODE).
#include <atomic>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/cli/daemon.h"
#include "tests/chaos/soak.h"

ABSL_FLAG(std::string, bin_dir, "",
          "Directory of mt-coordinator, mt-worker, mt-train and mtctl (default: beside this "
          "program's directory, ../bin).");
ABSL_FLAG(absl::Duration, duration, absl::Minutes(2),
          "How long faults are injected (e.g. 90s, 20m, 1h); the references before and the "
          "drain after come on top.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the fault plan; 0 = a random one (printed either way).");
ABSL_FLAG(int, worker_nodes, 4, "Worker nodes (network namespaces), two CPU workers each.");
ABSL_FLAG(int, train_iters, 60, "Steps of each job.");
ABSL_FLAG(int, save_interval, 10, "Steps between a job's checkpoints (and its evaluations).");
ABSL_FLAG(int, hang_floor_seconds, 10, "The jobs' restart.hang_timeout_floor_seconds.");
ABSL_FLAG(absl::Duration, fault_gap_min, absl::Seconds(2),
          "Shortest pause between faults (after the jobs are safe to hit again).");
ABSL_FLAG(absl::Duration, fault_gap_max, absl::Seconds(6), "Longest pause between faults.");
ABSL_FLAG(absl::Duration, rss_warmup, absl::Seconds(60),
          "Time a coordinator runs before its memory baseline is taken; a run is judged when it "
          "goes on for as long again.");
ABSL_FLAG(std::string, output, "text", "Report format on stdout: text or json.");

namespace {

std::string DefaultBinDir(const char* argv0) {
  std::string self(argv0);
  const size_t slash = self.rfind('/');
  return (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) + "/../bin";
}

uint64_t RandomSeed() {
  std::FILE* f = std::fopen("/dev/urandom", "rb");
  uint64_t seed = 0;
  if (f != nullptr) {
    if (std::fread(&seed, sizeof(seed), 1, f) != 1) seed = 0;
    std::fclose(f);
  }
  return seed == 0 ? static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) : seed;
}

}  // namespace

int main(int argc, char** argv) {
  mt::cli::ParseFlags(argc, argv,
                      "Chaos soak of an mt cluster over network namespaces (needs root): faults "
                      "while tiny GPT jobs train, invariants checked all along.\n\n"
                      "  mt-chaos-soak [--duration 2m] [--seed N] [--output text|json]");
  mt::chaos::SoakConfig config;
  config.bin_dir =
      absl::GetFlag(FLAGS_bin_dir).empty() ? DefaultBinDir(argv[0]) : absl::GetFlag(FLAGS_bin_dir);
  config.duration = absl::GetFlag(FLAGS_duration);
  config.seed = absl::GetFlag(FLAGS_seed) != 0 ? absl::GetFlag(FLAGS_seed) : RandomSeed();
  config.worker_nodes = absl::GetFlag(FLAGS_worker_nodes);
  config.train_iters = absl::GetFlag(FLAGS_train_iters);
  config.save_interval = absl::GetFlag(FLAGS_save_interval);
  config.hang_floor_seconds = absl::GetFlag(FLAGS_hang_floor_seconds);
  config.fault_gap_min = absl::GetFlag(FLAGS_fault_gap_min);
  config.fault_gap_max = absl::GetFlag(FLAGS_fault_gap_max);
  config.rss_warmup = absl::GetFlag(FLAGS_rss_warmup);
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output != "text" && output != "json") {
    std::fprintf(stderr, "mt-chaos-soak: --output: '%s' is neither text nor json\n",
                 output.c_str());
    return 2;
  }
  if (absl::Status s = config.Validate(); !s.ok()) {
    std::fprintf(stderr, "mt-chaos-soak: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  std::atomic<bool> interrupted{false};
  config.interrupted = &interrupted;
  mt::cli::BlockTerminationSignals();
  mt::cli::OnTerminationSignal([&interrupted](int) { interrupted.store(true); });

  absl::StatusOr<mt::chaos::SoakReport> report = mt::chaos::RunSoak(config);
  if (absl::IsFailedPrecondition(report.status())) {
    std::fprintf(stderr, "mt-chaos-soak: SKIPPED: %s\n",
                 std::string(report.status().message()).c_str());
    return 77;
  }
  if (!report.ok()) {
    std::fprintf(stderr, "mt-chaos-soak: %s\n", std::string(report.status().message()).c_str());
    return 1;
  }
  std::fputs(output == "json" ? report->Json().c_str() : report->Text().c_str(), stdout);
  return report->violations.empty() ? 0 : 1;
}
