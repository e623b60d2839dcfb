#include "tests/chaos/processes.h"

#include <dirent.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/files.h"

namespace mt::chaos {
namespace {

std::vector<pid_t> AllPids() {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* d = ::readdir(proc)) {
    pid_t pid = 0;
    if (absl::SimpleAtoi(d->d_name, &pid)) out.push_back(pid);
  }
  ::closedir(proc);
  return out;
}

// A /proc file of `pid`; empty when the process is gone (also while it is being read: the
// read then fails with ESRCH, which an istreambuf_iterator would throw through).
std::string ReadProc(pid_t pid, const char* file) {
  return mt::ReadFile(absl::StrCat("/proc/", pid, "/", file)).value_or("");
}

// "<job>-a<attempt>-r<rank>" -> its three parts.
bool ParseRankDir(absl::string_view name, RankProcess* out) {
  const size_t r = name.rfind("-r");
  const size_t a = name.rfind("-a", r);
  if (r == absl::string_view::npos || a == absl::string_view::npos || a == 0) return false;
  out->job_id = std::string(name.substr(0, a));
  return absl::SimpleAtoi(name.substr(a + 2, r - a - 2), &out->attempt) &&
         absl::SimpleAtoi(name.substr(r + 2), &out->rank);
}

}  // namespace

std::optional<RankProcess> ParseRankCommandLine(const std::string& root,
                                                const std::string& cmdline) {
  const std::vector<std::string> args = absl::StrSplit(cmdline, '\0', absl::SkipEmpty());
  if (args.size() != 3 || !absl::EndsWith(args[0], "/mt-train") || args[1] != "--assignment") {
    return std::nullopt;
  }
  absl::string_view path = args[2];
  if (!absl::ConsumePrefix(&path, root + "/") || !absl::ConsumeSuffix(&path, "/assignment.pb")) {
    return std::nullopt;
  }
  const std::vector<std::string> parts = absl::StrSplit(path, '/');
  RankProcess p;
  if (parts.size() != 2 || parts[0].empty() || !ParseRankDir(parts[1], &p)) return std::nullopt;
  p.worker = parts[0];
  return p;
}

std::vector<RankProcess> ScanRanks(const std::string& root) {
  std::vector<RankProcess> out;
  for (pid_t pid : AllPids()) {
    std::optional<RankProcess> p = ParseRankCommandLine(root, ReadProc(pid, "cmdline"));
    if (!p.has_value()) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
    const std::string stat = ReadProc(pid, "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 4 >= stat.size()) continue;
    const std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
    if (f.size() < 2 || f[0].empty() || !absl::SimpleAtoi(f[1], &p->ppid)) continue;
    p->pid = pid;
    p->state = f[0][0];
    out.push_back(*std::move(p));
  }
  return out;
}

std::vector<std::pair<pid_t, std::string>> ProcessesMentioning(const std::string& root) {
  std::vector<std::pair<pid_t, std::string>> out;
  for (pid_t pid : AllPids()) {
    if (pid == ::getpid()) continue;
    std::string cmdline = ReadProc(pid, "cmdline");
    if (!absl::StrContains(cmdline, root)) continue;
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    out.emplace_back(pid, std::string(absl::StripAsciiWhitespace(cmdline)));
  }
  return out;
}

std::optional<int64_t> ResidentBytes(pid_t pid) {
  const std::optional<ResidentMemory> m = ReadResidentMemory(pid);
  if (!m.has_value()) return std::nullopt;
  return m->total;
}

std::optional<ResidentMemory> ReadResidentMemory(pid_t pid) {
  ResidentMemory m;
  bool has_total = false;
  for (absl::string_view line : absl::StrSplit(ReadProc(pid, "status"), '\n')) {
    int64_t* field = nullptr;
    if (absl::ConsumePrefix(&line, "VmRSS:")) {
      field = &m.total;
      has_total = true;
    } else if (absl::ConsumePrefix(&line, "RssAnon:")) {
      field = &m.anon;
    } else if (absl::ConsumePrefix(&line, "RssFile:") || absl::ConsumePrefix(&line, "RssShmem:")) {
      field = &m.file;
    } else {
      continue;
    }
    line = absl::StripAsciiWhitespace(line);
    int64_t kib = 0;
    if (!absl::ConsumeSuffix(&line, " kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      return std::nullopt;
    }
    *field += kib * 1024;
  }
  if (!has_total) return std::nullopt;
  return m;
}

}  // namespace mt::chaos
