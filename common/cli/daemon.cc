#include "common/cli/daemon.h"

#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/cli/help_version.h"

namespace mt::cli {

void NormalizeFlagNames(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (a[0] != '-') continue;
    if (std::strcmp(a, "--") == 0) break;
    char* p = a + (a[1] == '-' ? 2 : 1);
    for (; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

std::vector<char*> ParseFlags(int argc, char** argv, const std::string& usage,
                              const std::string& flags_file) {
  NormalizeFlagNames(argc, argv);
  absl::flags_internal::SetProgramInvocationName(argv[0]);
  absl::FlagsUsageConfig config;
  config.version_string = [] { return VersionLine("mt") + "\n"; };
  config.contains_help_flags = [flags_file](absl::string_view path) {
    return absl::StrContains(path, flags_file) || absl::StrContains(path, "/cli/");
  };
  config.normalize_filename = [](absl::string_view f) { return std::string(f); };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  // absl's own --help exits with status 1; asking for help is not an error, so answer it here.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      absl::flags_internal::FlagsHelp(std::cout, flags_file,
                                      absl::flags_internal::HelpFormat::kHumanReadable, usage);
      std::exit(0);
    }
  }
  return absl::ParseCommandLine(argc, argv);
}

namespace {
// SIGTERM and SIGINT, less those this process inherited as ignored: a blocked signal is
// queued even when ignored, so leaving it out of the set is what keeps it ignored.
sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGTERM, SIGINT}) {
    struct sigaction current;
    if (sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    sigaddset(&set, sig);
  }
  return set;
}
}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void OnTerminationSignal(std::function<void(int signal)> on_signal) {
  sigset_t set = TerminationSignals();
  std::thread([set, on_signal = std::move(on_signal)] {
    int sig = 0;
    sigwait(&set, &sig);
    on_signal(sig);
  }).detach();
}

}  // namespace mt::cli
