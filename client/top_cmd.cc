// mtctl top: a live view of the cluster (jobs and workers), refreshed in place.
//
// On a terminal the screen is redrawn every --interval (cursor home, each line cleared to its
// end, the rest of the screen cleared: no flicker) until Ctrl-C; otherwise, and with -o json or
// -o yaml, one snapshot is printed and mtctl exits.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/verbs.h"
#include "common/cli/daemon.h"
#include "common/rpc/grpc_status.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "mt/v1/client_service.grpc.pb.h"

ABSL_FLAG(absl::Duration, interval, absl::Seconds(2), "top: time between refreshes.");

namespace mt::client {
namespace {

using google::protobuf::util::TimeUtil;

struct Snapshot {
  mt::v1::ClusterInfo cluster;
  mt::v1::ListJobsResponse jobs;  // active: scheduled, running, restarting
  mt::v1::ListWorkersResponse workers;
  absl::Time time;
};

std::string Short(const std::string& enum_name, const std::string& prefix) {
  return enum_name.rfind(prefix, 0) == 0 ? enum_name.substr(prefix.size()) : enum_name;
}

std::string Value(double v, const char* fmt) {
  if (std::isnan(v) || std::isinf(v)) return "-";
  return absl::StrFormat(fmt, v);
}

std::string Tokens(double per_second) {
  if (per_second <= 0) return "-";
  if (per_second >= 1e6) return absl::StrFormat("%.2fM", per_second / 1e6);
  if (per_second >= 1e3) return absl::StrFormat("%.1fK", per_second / 1e3);
  return absl::StrFormat("%.0f", per_second);
}

std::string Bytes(int64_t b) {
  if (b <= 0) return "-";
  const double v = static_cast<double>(b);
  if (v >= (1ull << 30)) return absl::StrFormat("%.1fG", v / (1ull << 30));
  return absl::StrFormat("%.0fM", v / (1ull << 20));
}

std::string Eta(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "-";
  return absl::FormatDuration(absl::Trunc(absl::Seconds(seconds), absl::Seconds(1)));
}

absl::StatusOr<Snapshot> Fetch(mt::v1::ClientService::Stub* stub) {
  Snapshot s;
  s.time = absl::Now();
  auto deadline = [](grpc::ClientContext* c) {
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  };
  {
    grpc::ClientContext c;
    deadline(&c);
    absl::Status st =
        rpc::FromGrpcStatus(stub->GetClusterInfo(&c, mt::v1::GetClusterInfoRequest(), &s.cluster));
    if (!st.ok()) return st;
  }
  std::string token;
  do {
    mt::v1::ListJobsRequest request;
    request.add_states(mt::v1::JOB_STATE_SCHEDULED);
    request.add_states(mt::v1::JOB_STATE_RUNNING);
    request.add_states(mt::v1::JOB_STATE_RESTARTING);
    request.set_page_size(1000);
    request.set_page_token(token);
    mt::v1::ListJobsResponse page;
    grpc::ClientContext c;
    deadline(&c);
    absl::Status st = rpc::FromGrpcStatus(stub->ListJobs(&c, request, &page));
    if (!st.ok()) return st;
    for (auto& j : *page.mutable_jobs()) *s.jobs.add_jobs() = std::move(j);
    s.jobs.set_total_count(page.total_count());
    token = page.next_page_token();
  } while (!token.empty());
  token.clear();
  do {
    mt::v1::ListWorkersRequest request;
    request.set_page_size(1000);
    request.set_page_token(token);
    mt::v1::ListWorkersResponse page;
    grpc::ClientContext c;
    deadline(&c);
    absl::Status st = rpc::FromGrpcStatus(stub->ListWorkers(&c, request, &page));
    if (!st.ok()) return st;
    for (auto& w : *page.mutable_workers()) *s.workers.add_workers() = std::move(w);
    s.workers.set_total_count(page.total_count());
    token = page.next_page_token();
  } while (!token.empty());
  return s;
}

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
    rows.push_back({j.id(), j.spec().name().substr(0, 24),
                    Short(mt::v1::JobState_Name(j.state()), "JOB_STATE_"),
                    absl::StrCat(p.step(), "/", p.total_steps()),
                    stepped ? Value(p.loss(), "%.4f") : "-",
                    p.validation_step() > 0 ? Value(p.validation_loss(), "%.4f") : "-",
                    stepped ? Tokens(p.tokens_per_second()) : "-",
                    stepped && p.mfu() > 0 ? Value(100 * p.mfu(), "%.1f%%") : "-",
                    Bytes(p.memory_allocated_bytes()), Bytes(p.memory_peak_bytes()),
                    stepped ? Eta(p.eta_seconds()) : "-"});
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
    const double ago =
        w.last_heartbeat_time().seconds() > 0
            ? absl::ToDoubleSeconds(s.time - absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(
                                                 w.last_heartbeat_time())))
            : -1;
    rows.push_back({w.id(), w.resources().node(),
                    w.resources().gpu_index() < 0 ? "cpu" : absl::StrCat(w.resources().gpu_index()),
                    Short(mt::v1::WorkerState_Name(w.state()), "WORKER_STATE_"),
                    w.job_id().empty() ? "-" : w.job_id(),
                    w.job_id().empty() ? "-" : absl::StrCat(w.rank()),
                    ago >= 0 ? absl::StrFormat("%.1fs", ago) : "-"});
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
  auto channel = Connect(options);
  if (!channel.ok()) return Fail(channel.status());
  auto stub = mt::v1::ClientService::NewStub(*channel);
  if (!live) {
    absl::StatusOr<Snapshot> s = Fetch(stub.get());
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
    absl::StatusOr<Snapshot> s = Fetch(stub.get());
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
