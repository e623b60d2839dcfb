// mtctl top: a live view of the cluster (jobs and workers), refreshed in place.
//
// On a terminal the screen is redrawn every --interval (cursor home, each line cleared to its
// end, the rest of the screen cleared: no flicker) until Ctrl-C; otherwise, and with -o json or
// -o yaml, one snapshot is printed and mtctl exits.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/format.h"
#include "client/rpc.h"
#include "client/verbs.h"
#include "common/cli/daemon.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

ABSL_FLAG(absl::Duration, interval, absl::Seconds(2), "top: time between refreshes.");

namespace mt::client {
namespace {

struct Snapshot {
  mt::v1::ClusterInfo cluster;
  mt::v1::ListJobsResponse jobs;  // active: scheduled, running, restarting
  mt::v1::ListWorkersResponse workers;
  absl::Time time;
};

constexpr absl::Duration kTimeout = absl::Seconds(10);

absl::StatusOr<Snapshot> Fetch(Stub* stub) {
  Snapshot s;
  s.time = absl::Now();
  MT_RETURN_IF_ERROR(
      Call(stub, &Stub::GetClusterInfo, mt::v1::GetClusterInfoRequest(), &s.cluster, kTimeout));
  mt::v1::ListJobsRequest active;
  active.add_states(mt::v1::JOB_STATE_SCHEDULED);
  active.add_states(mt::v1::JOB_STATE_RUNNING);
  active.add_states(mt::v1::JOB_STATE_RESTARTING);
  MT_ASSIGN_OR_RETURN(s.jobs, ListAll(stub, &Stub::ListJobs, active, kTimeout));
  MT_ASSIGN_OR_RETURN(s.workers,
                      ListAll(stub, &Stub::ListWorkers, mt::v1::ListWorkersRequest(), kTimeout));
  return s;
}

// Tokens per second for a column: "-" until there is a rate.
std::string Tokens(double per_second) { return per_second <= 0 ? "-" : ScaledCount(per_second); }

std::string Render(const Snapshot& s, const std::string& coordinator) {
  const mt::v1::ClusterInfo& c = s.cluster;
  std::string out = absl::StrCat("mt top  ", coordinator, "  ",
                                 absl::FormatTime("%H:%M:%S", s.time, absl::LocalTimeZone()),
                                 "\nworkers ", c.workers_total(), " (", c.workers_idle(), " idle, ",
                                 c.workers_busy(), " busy, ", c.workers_lost(), " lost)   jobs ",
                                 c.jobs_running(), " running, ", c.jobs_pending(), " pending\n\n");
  std::vector<std::vector<std::string>> rows;
  for (const mt::v1::Job& j : s.jobs.jobs()) {
    const mt::v1::Progress& p = j.progress();
    const bool stepped = p.step() > 0;
    rows.push_back({j.id(), j.spec().name().substr(0, 24), StateName(j.state()),
                    absl::StrCat(p.step(), "/", p.total_steps()),
                    stepped ? FiniteNumber(p.loss(), "%.4f") : "-",
                    p.validation_step() > 0 ? FiniteNumber(p.validation_loss(), "%.4f") : "-",
                    stepped ? Tokens(p.tokens_per_second()) : "-",
                    stepped && p.mfu() > 0 ? FiniteNumber(100 * p.mfu(), "%.1f%%") : "-",
                    CompactBytes(p.memory_allocated_bytes()), CompactBytes(p.memory_peak_bytes()),
                    stepped || p.no_progress_seconds() > 0 ? EtaOrStall(p) : "-"});
  }
  if (rows.empty()) {
    absl::StrAppend(&out, "no running jobs\n");
  } else {
    absl::StrAppend(&out, FormatTable({"JOB", "NAME", "STATE", "STEP", "LOSS", "VAL LOSS", "TOK/S",
                                       "MFU", "MEM", "PEAK", "ETA"},
                                      rows));
  }
  rows.clear();
  for (const mt::v1::Worker& w : s.workers.workers()) {
    if (w.state() == mt::v1::WORKER_STATE_GONE) continue;
    rows.push_back({w.id(), w.resources().node(),
                    w.resources().gpu_index() < 0 ? "cpu" : absl::StrCat(w.resources().gpu_index()),
                    StateName(w.state()), w.job_id().empty() ? "-" : w.job_id(),
                    w.job_id().empty() ? "-" : absl::StrCat(w.rank()),
                    SecondsAgo(w.last_heartbeat_time(), s.time)});
  }
  absl::StrAppend(
      &out, "\n",
      rows.empty()
          ? "no workers\n"
          : FormatTable({"WORKER", "NODE", "GPU", "STATE", "JOB", "RANK", "HEARTBEAT"}, rows));
  return out;
}

// One JSON object {cluster, jobs, workers}.
google::protobuf::Struct ToStruct(const Snapshot& s) {
  google::protobuf::Struct out;
  auto put = [&](const char* key, const google::protobuf::Message& m) {
    google::protobuf::Value v;
    (void)google::protobuf::util::JsonStringToMessage(ToJson(m), &v);
    (*out.mutable_fields())[key] = v;
  };
  put("cluster", s.cluster);
  put("jobs", s.jobs);
  put("workers", s.workers);
  return out;
}

}  // namespace

int RunTop(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("top takes no arguments"));
  const absl::Duration interval = absl::GetFlag(FLAGS_interval);
  if (interval < absl::Milliseconds(100)) {
    return Fail(absl::InvalidArgumentError("--interval must be at least 100ms"));
  }
  const bool live = options.output == OutputFormat::kTable && ::isatty(STDOUT_FILENO) == 1;
  // Ctrl-C ends the live loop (the cursor comes back on the way out): signals are blocked
  // before gRPC starts its threads and taken by one thread of ours.
  auto stop = std::make_shared<absl::Notification>();
  if (live) {
    cli::BlockTerminationSignals();
    cli::OnTerminationSignal([stop](int) {
      if (!stop->HasBeenNotified()) stop->Notify();
    });
  }
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  if (!live) {
    absl::StatusOr<Snapshot> s = Fetch(stub->get());
    if (!s.ok()) return Fail(s.status());
    if (options.output == OutputFormat::kTable) {
      std::cout << Render(*s, options.coordinator);
    } else {
      PrintStructured(ToStruct(*s), options.output);
    }
    return kExitOk;
  }
  std::cout << "\033[?25l\033[2J";
  while (true) {
    absl::StatusOr<Snapshot> s = Fetch(stub->get());
    std::string frame =
        s.ok() ? Render(*s, options.coordinator)
               : absl::StrCat("mt top  ", options.coordinator, "\n\n", s.status().message(),
                              "\n(retrying every ", absl::FormatDuration(interval), ")\n");
    std::string out = "\033[H";
    for (absl::string_view line : absl::StrSplit(frame, '\n')) {
      absl::StrAppend(&out, line, "\033[K\n");
    }
    out.resize(out.size() - 1);  // no newline after the last (empty) line
    absl::StrAppend(&out, "\033[J");
    std::cout << out << std::flush;
    if (stop->WaitForNotificationWithTimeout(interval)) break;
  }
  std::cout << "\033[?25h\n" << std::flush;
  return kExitOk;
}

}  // namespace mt::client
