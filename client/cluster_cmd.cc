// mtctl workers | info
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/format.h"
#include "client/rpc.h"
#include "client/verbs.h"
#include "google/protobuf/util/time_util.h"

namespace mt::client {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(10);

}  // namespace

int RunWorkers(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("workers takes no arguments"));
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  auto all = ListAll(stub->get(), &Stub::ListWorkers, mt::v1::ListWorkersRequest(), kTimeout);
  if (!all.ok()) return Fail(all.status());
  if (options.output != OutputFormat::kTable) {
    PrintStructured(*all, options.output);
    return kExitOk;
  }
  const absl::Time now = absl::Now();
  std::vector<std::vector<std::string>> rows;
  for (const auto& w : all->workers()) {
    rows.push_back({w.id(), w.resources().node(),
                    w.resources().gpu_index() < 0 ? "cpu" : absl::StrCat(w.resources().gpu_index()),
                    w.resources().device_name(), Gib(w.resources().memory_bytes()),
                    StateName(w.state()), w.job_id().empty() ? "-" : w.job_id(),
                    SecondsAgo(w.last_heartbeat_time(), now, " ago")});
  }
  std::cout << FormatTable({"ID", "NODE", "GPU", "DEVICE", "MEMORY", "STATE", "JOB", "HEARTBEAT"},
                           rows);
  return kExitOk;
}

int RunInfo(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("info takes no arguments"));
  auto stub = NewStub(options);
  if (!stub.ok()) return Fail(stub.status());
  mt::v1::ClusterInfo info;
  absl::Status s =
      Call(stub->get(), &Stub::GetClusterInfo, mt::v1::GetClusterInfoRequest(), &info, kTimeout);
  if (!s.ok()) return Fail(s);
  if (options.output != OutputFormat::kTable) {
    PrintStructured(info, options.output);
    return kExitOk;
  }
  using google::protobuf::util::TimeUtil;
  std::cout << "coordinator  " << options.coordinator << " (mt " << info.version() << ", up since "
            << TimeUtil::ToString(info.start_time()) << ")\n"
            << "workers      " << info.workers_total() << " total, " << info.workers_idle()
            << " idle, " << info.workers_busy() << " busy, " << info.workers_lost() << " lost\n";
  if (!info.metrics_url().empty()) {
    std::cout << "metrics      " << info.metrics_url() << " (service discovery "
              << info.metrics_sd_url() << ")\n";
  }
  return kExitOk;
}

}  // namespace mt::client
