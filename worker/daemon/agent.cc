#include "worker/daemon/agent.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/base/files.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/base/version.h"
#include "common/rpc/dial.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/worker_credential.h"
#include "google/protobuf/util/time_util.h"
#include "worker/daemon/assignment_paths.h"
#include "worker/daemon/state_file.h"

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

std::vector<std::string> RankEnvironment(const AgentConfig& config,
                                         const mt::v1::WorkerResources& resources) {
  std::vector<std::string> env;
  if (!config.token_file.empty()) env.push_back("MT_TOKEN_FILE=" + config.token_file);
  for (std::string& e : rpc::ClientTlsEnvironment(config.tls)) env.push_back(std::move(e));
  // A CPU rank computes with the cores of its slot, no more: several slots share a machine.
  if (resources.gpu_index() < 0) {
    env.push_back(absl::StrCat("MT_CPU_THREADS=", resources.cpu_cores()));
    env.push_back(absl::StrCat("OPENBLAS_NUM_THREADS=", resources.cpu_cores()));
  }
  env.insert(env.end(), config.rank_environment.begin(), config.rank_environment.end());
  return env;
}

absl::StatusOr<std::string> TrainerBesideThisExecutable() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return absl::InternalError("cannot find this executable");
  const std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/')) + "/mt-train";
}

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(const AgentConfig& config,
                                                     RankObserver* observer) {
  MT_RETURN_IF_ERROR(config.Validate());
  MT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                      rpc::Dial({config.coordinator, config.token_file, config.tls,
                                 config.insecure_allow_plaintext}));
  AgentConfig resolved = config;
  if (resolved.work_dir.empty()) resolved.work_dir = absl::StrCat("/tmp/mt-worker-", ::getpid());
  if (resolved.trainer_binary.empty()) {
    auto beside = TrainerBesideThisExecutable();
    if (!beside.ok()) return Annotate(beside.status(), "pass --trainer-binary");
    resolved.trainer_binary = *std::move(beside);
  }
  if (::access(resolved.trainer_binary.c_str(), X_OK) != 0) {
    // The daemon still serves (registration, heartbeats); ranks sent here fail with this reason.
    MT_LOG(WARNING) << "the trainer " << resolved.trainer_binary
                    << " is missing or not executable (a build without LibTorch has none; pass "
                       "--trainer-binary): ranks assigned here will fail";
  }
  MT_ASSIGN_OR_RETURN(AllowedRoots roots, AllowedRoots::Create(config.allowed_roots));
  std::unique_ptr<Agent> agent(
      new Agent(resolved, DetectResources(resolved), std::move(channel), observer));
  agent->allowed_roots_ = std::move(roots);
  if (!config.state_file.empty()) {
    // A previous run's id lets the coordinator recognise this daemon after a restart.
    if (auto text = ReadFile(config.state_file, 4096); text.ok()) {
      MT_ASSIGN_OR_RETURN(WorkerState state, ParseWorkerState(*text));
      absl::MutexLock lock(&agent->mu_);
      agent->worker_id_ = state.worker_id;
      agent->credential_ = state.credential;
    }
  }
  return agent;
}

Agent::Agent(AgentConfig config, mt::v1::WorkerResources resources,
             std::shared_ptr<grpc::Channel> channel, RankObserver* observer)
    : config_(std::move(config)),
      resources_(std::move(resources)),
      observer_(observer),
      stub_(mt::v1::WorkerService::NewStub(std::move(channel))) {}

void Agent::Prepare(grpc::ClientContext* context, absl::Duration timeout) const {
  if (timeout > absl::ZeroDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  absl::MutexLock lock(&mu_);
  if (!session_.empty()) context->AddMetadata(rpc::kWorkerSessionHeader, session_);
}

std::string Agent::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

absl::Status Agent::RegisterOnce() {
  mt::v1::RegisterRequest request;
  {
    absl::MutexLock lock(&mu_);
    request.set_worker_id(worker_id_);
    request.set_worker_credential(credential_);
    request.set_session(session_);
  }
  *request.mutable_resources() = resources_;
  request.set_version(kVersion);
  request.set_metrics_address(config_.metrics_address);
  for (auto& r : Running()) *request.add_running() = std::move(r);
  mt::v1::RegisterResponse response;
  grpc::ClientContext context;
  Prepare(&context, absl::Seconds(5));
  // Waits for the channel to connect (a failing call would drop the connection attempt it
  // started): the daemon registers as soon as its coordinator is back.
  context.set_wait_for_ready(true);
  if (!Track(&context, /*at_shutdown=*/true)) return absl::CancelledError("shutting down");
  const grpc::Status registered = stub_->Register(&context, request, &response);
  Untrack(&context);
  MT_RETURN_IF_ERROR(rpc::FromGrpcStatus(registered));
  WorkerState state;
  {
    absl::MutexLock lock(&mu_);
    worker_id_ = response.worker_id();
    if (!response.worker_credential().empty()) credential_ = response.worker_credential();
    session_ = response.session();
    state = {worker_id_, credential_};
    heartbeat_interval_ =
        absl::Nanoseconds(TimeUtil::DurationToNanoseconds(response.heartbeat_interval()));
    if (heartbeat_interval_ <= absl::ZeroDuration()) heartbeat_interval_ = absl::Seconds(1);
  }
  if (!config_.state_file.empty()) {
    // Written before the file is visible under its name; the credential is for this user only.
    absl::Status s = WriteFileAtomically(config_.state_file, FormatWorkerState(state));
    if (s.ok() && ::chmod(config_.state_file.c_str(), 0600) != 0) {
      s = absl::InternalError(absl::StrCat("chmod 0600 ", config_.state_file));
    }
    if (!s.ok()) MT_LOG(WARNING) << "cannot keep the worker id: " << s;
  }
  MT_LOG(INFO) << "registered with " << config_.coordinator << " as " << response.worker_id()
               << " (node " << resources_.node() << ", " << resources_.device_name() << ")";
  return absl::OkStatus();
}

std::vector<mt::v1::RunningRank> Agent::Running() const {
  absl::MutexLock lock(&mu_);
  std::vector<mt::v1::RunningRank> out;
  for (const auto& [key, p] : ranks_) {
    if (p->exited()) continue;
    mt::v1::RunningRank& r = out.emplace_back();
    r.set_job_id(p->assignment().job_id());
    r.set_attempt(p->assignment().attempt());
    r.set_rank(p->assignment().coordinates().rank());
  }
  return out;
}

absl::Status Agent::Run() {
  assignment_thread_ = std::thread([this] { AssignmentLoop(); });
  absl::Duration backoff = absl::Milliseconds(200);
  absl::Status result = absl::OkStatus();
  bool registered = false;
  while (!stop_.HasBeenNotified()) {
    Reap();
    if (observer_ != nullptr) observer_->OnTick();
    if (!registered) {
      absl::Status s = RegisterOnce();
      if (s.ok()) {
        registered = true;
        absl::MutexLock lock(&mu_);
        registered_ = true;
        ++registrations_;  // wakes the exit reports that wait for the coordinator
        backoff = absl::Milliseconds(200);
        continue;
      }
      // Will not heal: a bad request, token or credential. ALREADY_EXISTS (the id is live
      // elsewhere) heals once that daemon is gone, so it is retried.
      if (absl::IsInvalidArgument(s) || absl::IsUnauthenticated(s) || absl::IsPermissionDenied(s)) {
        result = s;
        break;
      }
      MT_LOG(WARNING) << "cannot register with " << config_.coordinator << ": " << s.message()
                      << "; retrying in " << absl::FormatDuration(backoff);
      stop_.WaitForNotificationWithTimeout(backoff);
      backoff = std::min(backoff * 2, kMaxRegisterBackoff);
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
    for (auto& r : Running()) *request.add_running() = std::move(r);
    mt::v1::HeartbeatResponse response;
    grpc::ClientContext context;
    Prepare(&context, absl::Seconds(5));
    if (!Track(&context, /*at_shutdown=*/true)) break;
    absl::Status s = rpc::FromGrpcStatus(stub_->Heartbeat(&context, request, &response));
    Untrack(&context);
    if (stop_.HasBeenNotified()) break;
    if (s.ok()) {
      absl::MutexLock lock(&report_mu_);
      FlushUndelivered();  // what the coordinator missed while it was away
    }
    if (!s.ok() || !response.known()) {
      if (!s.ok()) {
        MT_LOG(WARNING) << "heartbeat failed: " << s.message();
      } else {
        MT_LOG(WARNING) << "the coordinator does not know " << request.worker_id()
                        << "; registering again";
      }
      registered = false;
      absl::MutexLock lock(&mu_);
      registered_ = false;
    }
  }
  // Ranks first (they may still report), then say goodbye. The assignment thread stops the
  // ranks it forked before it ends (AssignmentLoop); none is left for StopAllRanks here
  // unless that thread never ran.
  if (!stop_.HasBeenNotified()) Shutdown();
  if (assignment_thread_.joinable()) assignment_thread_.join();
  StopAllRanks(absl::Seconds(10));
  Goodbye(registered);
  return result;
}

void Agent::Goodbye(bool registered) {
  absl::Notification done;
  std::thread deadline([this, &done] {
    if (done.WaitForNotificationWithTimeout(kGoodbye)) return;
    MT_LOG(WARNING) << "the coordinator did not answer within " << absl::FormatDuration(kGoodbye)
                    << ": leaving without its goodbye";
    give_up_.store(true);
    absl::MutexLock lock(&mu_);
    for (auto& [context, at_shutdown] : calls_) context->TryCancel();
    if (report_call_ != nullptr) report_call_->TryCancel();
  });
  if (registered) {
    mt::v1::DeregisterRequest request;
    request.set_worker_id(worker_id());
    mt::v1::DeregisterResponse response;
    grpc::ClientContext context;
    Prepare(&context, absl::Seconds(1));
    absl::Status s = rpc::FromGrpcStatus(stub_->Deregister(&context, request, &response));
    if (!s.ok()) MT_LOG(WARNING) << "deregistering: " << s.message();
  }
  std::vector<ExitReporter> exits;
  {
    absl::MutexLock lock(&mu_);
    exits.swap(exit_threads_);
  }
  for (auto& e : exits) e.thread.join();
  {
    absl::MutexLock lock(&report_mu_);
    if (report_writer_ != nullptr && !give_up_.load()) {
      report_writer_->WritesDone();
      (void)report_writer_->Finish();
    }
    if (!undelivered_.empty()) {
      MT_LOG(WARNING) << undelivered_.size()
                      << " save/load reports never reached the coordinator (its catalog misses "
                         "them until the checkpoints are imported)";
    }
  }
  done.Notify();
  deadline.join();
  MT_LOG(INFO) << "stopped";
}

bool Agent::Track(grpc::ClientContext* context, bool at_shutdown) {
  absl::MutexLock lock(&mu_);
  if (give_up_.load() || (at_shutdown && stop_.HasBeenNotified())) return false;
  calls_[context] = at_shutdown;
  return true;
}

void Agent::Untrack(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  calls_.erase(context);
}

void Agent::AssignmentLoop() {
  while (!stop_.HasBeenNotified()) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return registered_ || stop_.HasBeenNotified();
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(200));
      if (!registered_) continue;
    }
    grpc::ClientContext context;
    Prepare(&context, absl::ZeroDuration());
    {
      absl::MutexLock lock(&mu_);
      if (stop_.HasBeenNotified()) break;  // Shutdown came before the context was there
      assign_context_ = &context;
    }
    mt::v1::StreamAssignmentsRequest request;
    request.set_worker_id(worker_id());
    auto reader = stub_->StreamAssignments(&context, request);
    mt::v1::WorkerCommand command;
    while (reader->Read(&command)) Handle(command);
    grpc::Status status = reader->Finish();
    {
      absl::MutexLock lock(&mu_);
      assign_context_ = nullptr;
    }
    if (!stop_.HasBeenNotified()) {
      if (!status.ok()) MT_LOG(DEBUG) << "assignment stream ended: " << status.error_message();
      stop_.WaitForNotificationWithTimeout(absl::Milliseconds(500));
    }
  }
  // The ranks this thread forked die with it (PR_SET_PDEATHSIG, SIGKILL, rank_process.cc):
  // stop them with SIGTERM first, so that they save, and wait for them.
  StopAllRanks(absl::Seconds(10));
}

void Agent::Handle(const mt::v1::WorkerCommand& command) {
  if (command.has_stop()) {
    const auto& stop = command.stop();
    absl::MutexLock lock(&mu_);
    auto it = ranks_.find(Key(stop.job_id(), stop.attempt()));
    if (it == ranks_.end()) return;
    MT_LOG(INFO) << "stopping " << stop.job_id() << ": " << stop.reason();
    // no_save: SIGKILL at once (no stop step, no save); otherwise SIGTERM, and SIGKILL after
    // the grace the coordinator chose (a cancel gives the save its timeout).
    const absl::Duration grace =
        stop.no_save() ? absl::ZeroDuration()
                       : absl::Seconds(stop.grace_seconds() > 0 ? stop.grace_seconds() : 10);
    it->second->Stop(grace);
    return;
  }
  if (!command.has_assign()) return;
  const mt::v1::Assignment& a = command.assign();
  const std::string key = Key(a.job_id(), a.attempt());
  {
    absl::MutexLock lock(&mu_);
    // A re-sent assignment: of a rank running here, or of one that already ended here.
    if (ranks_.count(key) > 0 || std::find(ended_.begin(), ended_.end(), key) != ended_.end()) {
      return;
    }
  }
  RankProcessOptions options;
  options.trainer_binary = config_.trainer_binary;
  options.work_dir = config_.work_dir;
  options.extra_env = RankEnvironment(config_, resources_);
  if (observer_ != nullptr) observer_->OnRankStarted(a);
  // This daemon's own check of the paths, right before the rank starts.
  const absl::Status allowed = CheckAssignmentPaths(a, allowed_roots_);
  absl::StatusOr<std::unique_ptr<RankProcess>> process =
      allowed.ok()
          ? RankProcess::Start(
                a, worker_id(), options, [this](const mt::v1::RankReport& r) { ForwardReport(r); },
                [this](const mt::v1::RankExitReport& r) { ReportExit(r); })
          : absl::StatusOr<std::unique_ptr<RankProcess>>(allowed);
  if (!process.ok()) {
    mt::v1::RankExitReport report;
    report.set_worker_id(worker_id());
    report.set_job_id(a.job_id());
    report.set_attempt(a.attempt());
    report.set_rank(a.coordinates().rank());
    report.set_outcome(mt::v1::RANK_OUTCOME_FAILED);
    report.set_exit_status(-1);
    report.set_message(absl::StrCat("the trainer could not start: ", process.status().message()));
    ReportExit(report);
    return;
  }
  absl::MutexLock lock(&mu_);
  ranks_[key] = *std::move(process);
}

void Agent::ForwardReport(const mt::v1::RankReport& report) {
  if (observer_ != nullptr) observer_->OnRankReport(report);
  // Telemetry is for this daemon's metrics; the coordinator needs the rest.
  if (report.has_telemetry() && !report.has_progress() && !report.has_checkpoint() &&
      !report.has_checkpoint_load() && !report.has_checkpoint_save_failure()) {
    return;
  }
  bool registered;
  {
    absl::MutexLock lock(&mu_);
    registered = registered_;
  }
  absl::MutexLock lock(&report_mu_);
  if (registered && FlushUndelivered() && WriteReport(report)) return;
  // Saves and loads are the coordinator's catalog, generated text is a client's answer: kept
  // until it is back. Progress is best effort; the next report supersedes it.
  if (!report.has_checkpoint() && !report.has_checkpoint_load() &&
      !report.has_checkpoint_save_failure() && !report.has_generated()) {
    return;
  }
  if (undelivered_.size() >= kMaxUndelivered) {
    MT_LOG(WARNING) << "dropping an undelivered report of " << undelivered_.front().job_id()
                    << " (more than " << kMaxUndelivered << " kept)";
    undelivered_.pop_front();
  }
  undelivered_.push_back(report);
}

bool Agent::FlushUndelivered() {
  while (!undelivered_.empty()) {
    if (!WriteReport(undelivered_.front())) return false;
    undelivered_.pop_front();
  }
  return true;
}

bool Agent::WriteReport(const mt::v1::RankReport& report) {
  for (int attempt = 0; attempt < 2 && !give_up_.load(); ++attempt) {
    if (report_writer_ == nullptr) {
      auto context = std::make_unique<grpc::ClientContext>();
      Prepare(context.get(), absl::ZeroDuration());
      {
        absl::MutexLock lock(&mu_);  // the goodbye's deadline cancels it
        report_call_ = context.get();
      }
      report_context_ = std::move(context);
      report_response_ = std::make_unique<mt::v1::ReportProgressResponse>();
      report_writer_ = stub_->ReportProgress(report_context_.get(), report_response_.get());
    }
    if (report_writer_->Write(report)) return true;
    (void)report_writer_->Finish();
    report_writer_.reset();
  }
  return false;
}

void Agent::ReportExit(const mt::v1::RankExitReport& report) {
  MT_LOG(INFO) << "rank " << report.rank() << " of " << report.job_id()
               << " ended: " << report.message();
  if (observer_ != nullptr) observer_->OnRankExited(report);
  absl::MutexLock lock(&mu_);
  ended_.push_back(Key(report.job_id(), report.attempt()));
  if (ended_.size() > kRememberEnded) ended_.pop_front();
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([this, report, done] {
    struct MarkDone {
      std::atomic<bool>* flag;
      ~MarkDone() { flag->store(true); }
    } mark{done.get()};
    DeliverExit(report);
  });
  exit_threads_.push_back({std::move(t), std::move(done)});
}

void Agent::DeliverExit(const mt::v1::RankExitReport& report) {
  absl::Duration backoff = absl::Milliseconds(200);
  int64_t seen = -1;
  // Since when the coordinator this daemon is registered with refuses the report.
  std::optional<absl::Time> refused_since;
  // Until the coordinator answers (an outage may last), or the goodbye's deadline passes.
  while (true) {
    mt::v1::RankExitResponse response;
    grpc::ClientContext context;
    Prepare(&context, absl::Seconds(5));                  // the deadline and this daemon's session
    if (!Track(&context, /*at_shutdown=*/false)) return;  // the goodbye's deadline passed
    bool registered;
    int64_t registrations;
    {
      absl::MutexLock lock(&mu_);
      registered = registered_;
      registrations = registrations_;
    }
    if (registrations != seen) refused_since.reset();  // a new coordinator, maybe
    seen = registrations;
    absl::Status s = rpc::FromGrpcStatus(stub_->ReportRankExit(&context, report, &response));
    Untrack(&context);
    if (s.ok()) return;
    if (IsRefusal(s) && registered) {
      // A coordinator that has just restarted may refuse it until it knows this daemon
      // again: the refusal is final once it lasts kRefusalGrace without a re-registration.
      if (!refused_since.has_value()) refused_since = absl::Now();
      if (absl::Now() - *refused_since >= kRefusalGrace) {
        MT_LOG(WARNING) << "the exit report of rank " << report.rank() << " of " << report.job_id()
                        << " was refused: " << s;
        return;
      }
    } else {
      refused_since.reset();
    }
    // Shutting down: retried quickly until the goodbye's deadline.
    if (stop_.HasBeenNotified()) backoff = absl::Milliseconds(200);
    WaitToRetry(backoff, registrations);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

bool Agent::IsRefusal(const absl::Status& s) {
  return absl::IsNotFound(s) || absl::IsInvalidArgument(s) || absl::IsFailedPrecondition(s) ||
         absl::IsPermissionDenied(s) || absl::IsUnauthenticated(s);
}

void Agent::WaitToRetry(absl::Duration backoff, int64_t registrations) {
  absl::MutexLock lock(&mu_);
  auto woken = [this, registrations]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return registrations_ != registrations || give_up_.load();
  };
  mu_.AwaitWithTimeout(absl::Condition(&woken), backoff);
}

void Agent::Reap() {
  std::vector<std::unique_ptr<RankProcess>> done;
  std::vector<std::thread> finished_reporters;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = exit_threads_.begin(); it != exit_threads_.end();) {
      if (it->done->load()) {
        finished_reporters.push_back(std::move(it->thread));
        it = exit_threads_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = ranks_.begin(); it != ranks_.end();) {
      if (it->second->exited()) {
        done.push_back(std::move(it->second));
        it = ranks_.erase(it);
      } else {
        ++it;
      }
    }
  }
  done.clear();  // joins their threads outside the lock
  for (auto& t : finished_reporters) t.join();
}

void Agent::StopAllRanks(absl::Duration grace) {
  std::vector<RankProcess*> running;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, p] : ranks_) {
      p->Stop(grace);
      running.push_back(p.get());
    }
  }
  for (RankProcess* p : running) p->WaitForExit(grace + absl::Seconds(2));
  Reap();
}

void Agent::Shutdown() {
  absl::MutexLock lock(&mu_);  // serialises concurrent calls; Notify may run once
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (assign_context_ != nullptr) assign_context_->TryCancel();
  for (auto& [context, at_shutdown] : calls_) {
    if (at_shutdown) context->TryCancel();  // a register or heartbeat in flight
  }
}

}  // namespace mt::worker
