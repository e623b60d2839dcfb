// SoakReport's text and JSON, and the entry of the soak.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/json.h"
#include "tests/chaos/soak.h"
#include "tests/chaos/soak_run.h"

namespace mt::chaos {
namespace {

// "n=3 min 1.2 median 2.0 max 4.1" of `v` (seconds).
std::string Summary(std::vector<double> v) {
  if (v.empty()) return "n=0";
  std::sort(v.begin(), v.end());
  return absl::StrFormat("n=%d min %.1f s, median %.1f s, max %.1f s", v.size(), v.front(),
                         v[v.size() / 2], v.back());
}

std::string JsonList(const std::vector<std::string>& v) {
  std::vector<std::string> quoted;
  for (const std::string& s : v) quoted.push_back(JsonQuote(s));
  return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
}

std::string JsonNumbers(const std::vector<double>& v) {
  return absl::StrCat("[",
                      absl::StrJoin(v, ", ",
                                    [](std::string* out, double d) {
                                      absl::StrAppend(out, absl::StrFormat("%.2f", d));
                                    }),
                      "]");
}

}  // namespace

std::string SoakReport::Text() const {
  std::string faults_text;
  int total = 0;
  for (const auto& [kind, n] : faults) {
    absl::StrAppend(&faults_text, faults_text.empty() ? "" : ", ", kind, " ", n);
    total += n;
  }
  std::string out = absl::StrFormat(
      "chaos soak, seed %d: fault phase %.0f s (%.0f s in all)\n"
      "faults injected: %d (%s)\n"
      "jobs: %d submitted (2 undisturbed references), %d ended SUCCEEDED with the reference's "
      "exact losses; %d restarts\n"
      "hang detection: %s\ntraining again after a fault: %s\n"
      "checks: %d process scans, %d catalog comparisons; WRITING entries left by dead saves: %d\n"
      "coordinator RSS: baseline %.1f MiB, final %.1f MiB, largest growth within a judged run "
      "%.2f%% (%d runs judged); at the end of each run: %s MiB\n",
      seed, fault_phase_seconds, total_seconds, total, faults_text, jobs_submitted,
      jobs_succeeded_exact, restarts, Summary(hang_detection_seconds), Summary(recovery_seconds),
      process_scans, catalog_checks, writing_entries_left, coordinator_rss_baseline_mib,
      coordinator_rss_final_mib, 100 * coordinator_rss_max_growth, coordinator_runs_judged,
      absl::StrJoin(coordinator_rss_run_end_mib, " ", [](std::string* out, double d) {
        absl::StrAppend(out, absl::StrFormat("%.1f", d));
      }));
  for (const std::string& f : fault_log) absl::StrAppend(&out, "  ", f, "\n");
  absl::StrAppend(&out, violations.empty() ? "every invariant held\n"
                                           : absl::StrCat(violations.size(), " violations:\n"));
  for (const std::string& v : violations) absl::StrAppend(&out, "  ", v, "\n");
  return out;
}

std::string SoakReport::Json() const {
  std::vector<std::string> by_kind;
  for (const auto& [kind, n] : faults) by_kind.push_back(absl::StrCat(JsonQuote(kind), ": ", n));
  return absl::StrCat(
      "{\"seed\": ", seed,
      ", \"fault_phase_seconds\": ", absl::StrFormat("%.1f", fault_phase_seconds),
      ", \"total_seconds\": ", absl::StrFormat("%.1f", total_seconds), ", \"faults\": {",
      absl::StrJoin(by_kind, ", "), "}, \"jobs_submitted\": ", jobs_submitted,
      ", \"jobs_succeeded_exact\": ", jobs_succeeded_exact, ", \"restarts\": ", restarts,
      ", \"hang_detection_seconds\": ", JsonNumbers(hang_detection_seconds),
      ", \"recovery_seconds\": ", JsonNumbers(recovery_seconds),
      ", \"process_scans\": ", process_scans, ", \"catalog_checks\": ", catalog_checks,
      ", \"writing_entries_left\": ", writing_entries_left,
      ", \"coordinator_rss_baseline_mib\": ", absl::StrFormat("%.1f", coordinator_rss_baseline_mib),
      ", \"coordinator_rss_final_mib\": ", absl::StrFormat("%.1f", coordinator_rss_final_mib),
      ", \"coordinator_rss_max_growth\": ", absl::StrFormat("%.4f", coordinator_rss_max_growth),
      ", \"coordinator_runs_judged\": ", coordinator_runs_judged,
      ", \"coordinator_rss_run_end_mib\": ", JsonNumbers(coordinator_rss_run_end_mib),
      ", \"fault_log\": ", JsonList(fault_log), ", \"violations\": ", JsonList(violations), "}\n");
}

absl::StatusOr<SoakReport> RunSoak(const SoakConfig& config) {
  if (absl::Status s = config.Validate(); !s.ok()) return s;
  Soak soak(config);
  return soak.Run();
}

}  // namespace mt::chaos
