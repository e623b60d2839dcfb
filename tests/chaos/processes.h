// What the chaos soak reads from /proc: the trainer processes (ranks) of its own cluster, found
// by their command line (mt-train --assignment <root>/<worker>/<job>-a<attempt>-r<rank>/
// assignment.pb, worker/daemon/rank_process.cc), any process still mentioning its directory,
// and a process's resident memory. Thread-safe free functions.
#ifndef MT_TESTS_CHAOS_PROCESSES_H_
#define MT_TESTS_CHAOS_PROCESSES_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mt::chaos {

struct RankProcess {
  pid_t pid = -1;
  pid_t ppid = -1;
  char state = '?';    // /proc/PID/stat's state: R, S, T (stopped), Z ...
  std::string worker;  // the daemon's work_dir name, e.g. "node2-w0"
  std::string job_id;
  int attempt = -1;
  int rank = -1;
};

// `cmdline` as /proc/PID/cmdline holds it (arguments separated by NUL). nullopt unless it is
// an mt-train run with an assignment under `root`.
std::optional<RankProcess> ParseRankCommandLine(const std::string& root,
                                                const std::string& cmdline);

// The rank processes under `root` (zombies included: an unreaped rank is still an orphan).
std::vector<RankProcess> ScanRanks(const std::string& root);

// Pids (other than this process) whose command line mentions `root`, with that command line.
std::vector<std::pair<pid_t, std::string>> ProcessesMentioning(const std::string& root);

// VmRSS of `pid` in bytes; nullopt when it is gone or unreadable.
std::optional<int64_t> ResidentBytes(pid_t pid);

// VmRSS and its parts (/proc/PID/status), in bytes: anonymous memory (the heap, malloc's
// arenas, stacks: what the process allocated) and file-backed pages (mostly the code of the
// binary and its libraries, resident once a code path first runs; shared, clean, not
// allocated by the process).
struct ResidentMemory {
  int64_t total = 0;  // VmRSS
  int64_t anon = 0;   // RssAnon
  int64_t file = 0;   // RssFile + RssShmem
};
std::optional<ResidentMemory> ReadResidentMemory(pid_t pid);

}  // namespace mt::chaos

#endif  // MT_TESTS_CHAOS_PROCESSES_H_
