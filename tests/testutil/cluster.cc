#include "tests/testutil/cluster.h"

#include <signal.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/files.h"
#include "common/data/indexed_dataset.h"
#include "common/rpc/auth.h"
#include "common/rpc/grpc_status.h"

namespace mt::testutil {

Cluster::Cluster(std::string bin_dir) : bin_(std::move(bin_dir)), dir_(MakeTempDir("cluster")) {}

Cluster::~Cluster() {
  for (auto& [name, w] : workers_) w->Signal(SIGKILL);
  if (coordinator_ != nullptr) coordinator_->Signal(SIGKILL);
}

absl::Status Cluster::StartCoordinator(const std::vector<std::string>& extra_flags) {
  const std::string addr_file = dir_ + "/address";
  ::unlink(addr_file.c_str());
  std::vector<std::string> argv = {
      bin_ + "/mt-coordinator",      "--listen=" + (address_.empty() ? "127.0.0.1:0" : address_),
      "--address_file=" + addr_file, "--state_dir=" + dir_ + "/state",
      "--heartbeat_interval=200ms",  "--lost_after=2s",
      "--stop_grace_seconds=5",      "--metrics_port=0"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  coordinator_ = std::make_unique<Subprocess>();
  if (absl::Status s = coordinator_->Start(argv, dir_ + "/coordinator.log"); !s.ok()) return s;
  auto addr = WaitForFile(addr_file, absl::Seconds(30));
  if (!addr.ok()) return addr.status();
  address_ = *addr;
  stub_ = mt::v1::ClientService::NewStub(rpc::MakeChannel(address_, ""));
  return absl::OkStatus();
}

void Cluster::KillCoordinator(int sig) {
  if (coordinator_ == nullptr) return;
  coordinator_->Signal(sig);
  (void)coordinator_->Wait(absl::Seconds(20));
}

absl::Status Cluster::StartWorker(const std::string& name, const std::string& node,
                                  const std::vector<std::string>& extra_flags) {
  return StartWorker(name, node, -1, extra_flags);
}

absl::Status Cluster::StartWorker(const std::string& name, const std::string& node, int gpu,
                                  const std::vector<std::string>& extra_flags) {
  auto w = std::make_unique<Subprocess>();
  std::vector<std::string> argv = {bin_ + "/mt-worker", "--coordinator=" + address_,
                                   "--node=" + node, absl::StrCat("--gpu=", gpu)};
  if (gpu < 0) argv.push_back("--cpu_cores=1");
  argv.push_back("--work_dir=" + dir_ + "/" + name);
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  absl::Status s = w->Start(argv, dir_ + "/" + name + ".log");
  workers_[name] = std::move(w);
  return s;
}

bool Cluster::WaitForIdleWorkers(int n, absl::Duration timeout) {
  return WaitFor(
      [&] {
        auto r = ListWorkers();
        if (!r.ok()) return false;
        int idle = 0;
        for (const auto& w : r->workers()) idle += w.state() == mt::v1::WORKER_STATE_IDLE;
        return idle == n;
      },
      timeout);
}

absl::StatusOr<mt::v1::Job> Cluster::GetJob(const std::string& id, bool events) {
  mt::v1::GetJobRequest request;
  request.set_job_id(id);
  request.set_include_events(events);
  mt::v1::Job job;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  absl::Status s = rpc::FromGrpcStatus(stub_->GetJob(&ctx, request, &job));
  if (!s.ok()) return s;
  return job;
}

absl::StatusOr<mt::v1::Job> Cluster::SubmitJob(const mt::v1::JobSpec& spec) {
  mt::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  mt::v1::SubmitJobResponse response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  absl::Status s = rpc::FromGrpcStatus(stub_->SubmitJob(&ctx, request, &response));
  if (!s.ok()) return s;
  return response.job();
}

absl::StatusOr<mt::v1::ListWorkersResponse> Cluster::ListWorkers(const std::string& token) {
  std::unique_ptr<mt::v1::ClientService::Stub> with_token;
  if (!token.empty()) {
    with_token = mt::v1::ClientService::NewStub(rpc::MakeChannel(address_, token));
  }
  mt::v1::ListWorkersResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  mt::v1::ClientService::Stub* stub = token.empty() ? stub_.get() : with_token.get();
  absl::Status s = rpc::FromGrpcStatus(stub->ListWorkers(&ctx, {}, &resp));
  if (!s.ok()) return s;
  return resp;
}

bool Cluster::WaitForState(const std::string& id, mt::v1::JobState state, absl::Duration timeout) {
  bool reached = false;
  WaitFor(
      [&] {
        auto job = GetJob(id);
        if (!job.ok()) return false;
        if (job->state() == state) {
          reached = true;
          return true;
        }
        return job->state() == mt::v1::JOB_STATE_SUCCEEDED ||
               job->state() == mt::v1::JOB_STATE_FAILED ||
               job->state() == mt::v1::JOB_STATE_CANCELLED;
      },
      timeout);
  return reached;
}

CommandResult Cluster::Mtctl(std::vector<std::string> args, absl::Duration timeout) {
  args.insert(args.begin(), bin_ + "/mtctl");
  auto r = RunCommand(args, timeout, {"MT_COORDINATOR=" + address_});
  if (!r.ok()) return CommandResult{-1, "", std::string(r.status().message())};
  return *r;
}

std::string Cluster::Log(const std::string& name) {
  return ReadFile(dir_ + "/" + name).value_or("");
}

std::string WriteRepetitiveDataset(const std::string& dir, int documents, int tokens_per_doc) {
  const std::string prefix = dir + "/repeat_text_document";
  auto writer = data::IndexedDatasetWriter::Create(prefix, data::DType::kUInt16);
  if (!writer.ok()) return "";
  const int32_t phrase[] = {464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13};
  for (int d = 0; d < documents; ++d) {
    std::vector<int32_t> tokens;
    for (int t = 0; t < tokens_per_doc; ++t) tokens.push_back(phrase[t % 10]);
    tokens.push_back(50256);
    if (!(*writer)->AddDocument(tokens).ok()) return "";
  }
  if (!(*writer)->Finalize().ok()) return "";
  return prefix;
}

}  // namespace mt::testutil
