// What every binary's thin main.cc shares: usage/--version set-up and SIGTERM/SIGINT handling.
#ifndef MT_COMMON_CLI_DAEMON_H_
#define MT_COMMON_CLI_DAEMON_H_

#include <functional>
#include <string>
#include <vector>

namespace mt::cli {

// Rewrites "--foo-bar[=v]" to "--foo_bar[=v]" in place up to a "--" argument, so that flags
// are accepted in both spellings (Megatron-LM users write hyphens; absl names use '_').
void NormalizeFlagNames(int argc, char** argv);

// Normalizes flag names (above), sets the usage text and the --version string, parses flags, and
// returns the positional arguments (argv[0] first). --help lists the flags defined in files
// whose path contains `flags_file` ("main.cc": a binary's thin main; a single-file tool names
// its own file). Exits with status 2 and a message on a bad flag.
std::vector<char*> ParseFlags(int argc, char** argv, const std::string& usage,
                              const std::string& flags_file = "main.cc");

// Blocks SIGTERM/SIGINT in the calling thread; threads started afterwards inherit the mask.
// Call first thing in main, before any library starts threads. A signal the process inherited
// as ignored (`trap '' TERM; exec mt-coordinator ...`, nohup) stays ignored: it is neither
// blocked nor waited for, as shells do (deploy/slurm/mt.sbatch keeps its coordinator alive
// through Slurm's SIGTERM this way, and stops it with SIGINT).
void BlockTerminationSignals();

// Starts a thread that waits for SIGTERM/SIGINT and then calls `on_signal` once. The thread
// lives for the rest of the process.
void OnTerminationSignal(std::function<void(int signal)> on_signal);

}  // namespace mt::cli

#endif  // MT_COMMON_CLI_DAEMON_H_
