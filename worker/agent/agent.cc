#include "worker/agent/agent.h"

#include <unistd.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/version.h"
#include "common/rpc/auth.h"
#include "common/rpc/grpc_status.h"
#include "google/protobuf/util/time_util.h"

namespace mt::worker {
namespace {

using google::protobuf::util::TimeUtil;

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

int64_t HostMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

}  // namespace

absl::Status AgentConfig::Validate() const {
  if (coordinator.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--coordinator '", coordinator, "' must be host:port, e.g. 127.0.0.1:7070"));
  }
  if (gpu_index < -1 || gpu_index > 1023) {
    return absl::InvalidArgumentError("--gpu must be -1 (CPU slot) or a GPU index 0..1023");
  }
  if (cpu_cores < 0 || cpu_cores > 4096) {
    return absl::InvalidArgumentError("--cpu-cores must be 0..4096 (0 = all)");
  }
  return absl::OkStatus();
}

mt::v1::WorkerResources DetectResources(const AgentConfig& config) {
  mt::v1::WorkerResources r;
  r.set_node(config.node.empty() ? HostName() : config.node);
  r.set_gpu_index(config.gpu_index);
  const int cores = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  r.set_cpu_cores(config.cpu_cores > 0 ? config.cpu_cores : cores);
  if (config.gpu_index < 0) {
    r.set_device_name("cpu");
    r.set_memory_bytes(HostMemoryBytes());
  } else {
    // The daemon links no CUDA; the trainer reports the device's name and memory once it
    // runs. Until then the slot is named by its index.
    r.set_device_name(absl::StrCat("cuda:", config.gpu_index));
  }
  return r;
}

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(const AgentConfig& config) {
  MT_RETURN_IF_ERROR(config.Validate());
  std::string token;
  if (!config.token_file.empty()) {
    auto tokens = rpc::ReadTokenFile(config.token_file);
    if (!tokens.ok()) return Annotate(tokens.status(), "--token-file");
    token = tokens->front();
  }
  std::unique_ptr<Agent> agent(new Agent(config, DetectResources(config), token));
  if (!config.state_file.empty()) {
    // A previous run's id lets the coordinator recognise this daemon after a restart.
    if (auto id = ReadFile(config.state_file, 4096); id.ok()) {
      absl::MutexLock lock(&agent->mu_);
      agent->worker_id_ = std::string(absl::StripAsciiWhitespace(*id));
    }
  }
  return agent;
}

Agent::Agent(AgentConfig config, mt::v1::WorkerResources resources, std::string token)
    : config_(std::move(config)),
      resources_(std::move(resources)),
      stub_(mt::v1::WorkerService::NewStub(rpc::MakeChannel(config_.coordinator, token))) {}

std::string Agent::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

absl::Status Agent::RegisterOnce() {
  mt::v1::RegisterRequest request;
  request.set_worker_id(worker_id());
  *request.mutable_resources() = resources_;
  request.set_version(kVersion);
  mt::v1::RegisterResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  MT_RETURN_IF_ERROR(rpc::FromGrpcStatus(stub_->Register(&context, request, &response)));
  {
    absl::MutexLock lock(&mu_);
    worker_id_ = response.worker_id();
    heartbeat_interval_ =
        absl::Nanoseconds(TimeUtil::DurationToNanoseconds(response.heartbeat_interval()));
    if (heartbeat_interval_ <= absl::ZeroDuration()) heartbeat_interval_ = absl::Seconds(1);
  }
  if (!config_.state_file.empty()) {
    if (absl::Status s = WriteFileAtomically(config_.state_file, response.worker_id() + "\n");
        !s.ok()) {
      MT_LOG(WARNING) << "cannot keep the worker id: " << s;
    }
  }
  MT_LOG(INFO) << "registered with " << config_.coordinator << " as " << response.worker_id()
               << " (node " << resources_.node() << ", " << resources_.device_name() << ")";
  return absl::OkStatus();
}

absl::Status Agent::Run() {
  absl::Duration backoff = absl::Milliseconds(200);
  bool registered = false;
  while (!stop_.HasBeenNotified()) {
    if (!registered) {
      absl::Status s = RegisterOnce();
      if (s.ok()) {
        registered = true;
        backoff = absl::Milliseconds(200);
        continue;
      }
      if (absl::IsInvalidArgument(s) || absl::IsUnauthenticated(s)) return s;  // will not heal
      MT_LOG(WARNING) << "cannot register with " << config_.coordinator << ": " << s.message()
                      << "; retrying in " << absl::FormatDuration(backoff);
      stop_.WaitForNotificationWithTimeout(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(5));
      continue;
    }
    absl::Duration interval;
    {
      absl::MutexLock lock(&mu_);
      interval = heartbeat_interval_;
    }
    if (stop_.WaitForNotificationWithTimeout(interval)) break;
    mt::v1::HeartbeatRequest request;
    request.set_worker_id(worker_id());
    mt::v1::HeartbeatResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    absl::Status s = rpc::FromGrpcStatus(stub_->Heartbeat(&context, request, &response));
    if (!s.ok()) {
      MT_LOG(WARNING) << "heartbeat failed: " << s.message();
      registered = false;
    } else if (!response.known()) {
      MT_LOG(WARNING) << "the coordinator does not know " << request.worker_id()
                      << "; registering again";
      registered = false;
    }
  }
  if (registered) {
    mt::v1::DeregisterRequest request;
    request.set_worker_id(worker_id());
    mt::v1::DeregisterResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    absl::Status s = rpc::FromGrpcStatus(stub_->Deregister(&context, request, &response));
    if (!s.ok()) MT_LOG(WARNING) << "deregistering: " << s.message();
  }
  return absl::OkStatus();
}

void Agent::Shutdown() {
  absl::MutexLock lock(&mu_);  // serialises concurrent calls; Notify may run once
  if (!stop_.HasBeenNotified()) stop_.Notify();
}

}  // namespace mt::worker
