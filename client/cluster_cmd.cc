// mtctl workers | info
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/verbs.h"
#include "common/rpc/grpc_status.h"
#include "google/protobuf/util/time_util.h"
#include "mt/v1/client_service.grpc.pb.h"

namespace mt::client {
namespace {

using google::protobuf::util::TimeUtil;

std::string ShortState(int state) {
  std::string s = mt::v1::WorkerState_Name(static_cast<mt::v1::WorkerState>(state));
  const std::string prefix = "WORKER_STATE_";
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

std::string Ago(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0) return "-";
  absl::Duration d = absl::Now() - absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t));
  return absl::StrFormat("%.1fs ago", absl::ToDoubleSeconds(d));
}

std::string Gib(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
}

}  // namespace

int RunWorkers(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("workers takes no arguments"));
  auto channel = Connect(options);
  if (!channel.ok()) return Fail(channel.status());
  auto stub = mt::v1::ClientService::NewStub(*channel);
  mt::v1::ListWorkersResponse all;
  std::string token;
  do {
    mt::v1::ListWorkersRequest request;
    request.set_page_size(1000);
    request.set_page_token(token);
    mt::v1::ListWorkersResponse page;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    absl::Status s = rpc::FromGrpcStatus(stub->ListWorkers(&context, request, &page));
    if (!s.ok()) return Fail(s);
    for (auto& w : *page.mutable_workers()) *all.add_workers() = std::move(w);
    all.set_total_count(page.total_count());
    token = page.next_page_token();
  } while (!token.empty());
  if (options.output != OutputFormat::kTable) {
    PrintStructured(all, options.output);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& w : all.workers()) {
    rows.push_back({w.id(), w.resources().node(),
                    w.resources().gpu_index() < 0 ? "cpu" : absl::StrCat(w.resources().gpu_index()),
                    w.resources().device_name(), Gib(w.resources().memory_bytes()),
                    ShortState(w.state()), w.job_id().empty() ? "-" : w.job_id(),
                    Ago(w.last_heartbeat_time())});
  }
  std::cout << FormatTable({"ID", "NODE", "GPU", "DEVICE", "MEMORY", "STATE", "JOB", "HEARTBEAT"},
                           rows);
  return kExitOk;
}

int RunInfo(const std::vector<std::string>& args, const GlobalOptions& options) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("info takes no arguments"));
  auto channel = Connect(options);
  if (!channel.ok()) return Fail(channel.status());
  auto stub = mt::v1::ClientService::NewStub(*channel);
  mt::v1::ClusterInfo info;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  absl::Status s =
      rpc::FromGrpcStatus(stub->GetClusterInfo(&context, mt::v1::GetClusterInfoRequest(), &info));
  if (!s.ok()) return Fail(s);
  if (options.output != OutputFormat::kTable) {
    PrintStructured(info, options.output);
    return kExitOk;
  }
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
