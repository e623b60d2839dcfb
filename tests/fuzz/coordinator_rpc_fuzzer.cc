// Fuzz target: every coordinator RPC's request handling, in process. The services of a real
// coordinator (JobManager, WorkerRegistry, CheckpointCatalog on a SQLite store in a scratch
// directory, rank credentials under a fixed key) are called directly: byte 0 picks the RPC,
// byte 1 the credentials, the rest is the request's wire encoding (ParseFromArray; an input
// that does not parse is dropped). State persists across inputs, so sequences of calls
// (register, submit, report, rendezvous, cancel) are reached.
//
// Byte 1: bits 0-2 the bearer token (5: a submit token's, whose jobs and checkpoints are its
// own only; 6: none; 7: the body's first bytes; else the admin's);
// bits 3-4 the rank credential of a rendezvous call (0: the one issued for the rank, attempt
// and job the request names; 1: that of the rank of the job set up here; 2: the one of another
// rank; 3: none); bit 5 the worker session of a heartbeat, deregistration or exit report
// (0: the session the worker it names got when it registered; 1: none). The set-up job (one
// rank on one registered CPU worker, placed and its assignment taken) is made again when an
// input ended it (checked every 64 inputs), so the rendezvous handlers have a live attempt
// to reach; a checkpoint imported under it likewise, for the checkpoint RPCs. The set-up job
// belongs to the submit token's name ("alice").
//
// The three server-streaming RPCs (WatchJob, StreamAssignments, DownloadCheckpoint) need a
// live stream, and ReportProgress a reading one: their handling is reached through what their
// handlers call (JobManager::WaitForChange, TakeCommands, OnRankReport,
// CheckpointCatalog::Download, OnCheckpointReport).
//
// Paths a request names (save/load/TensorBoard dirs, import/export/report directories) are
// moved under the scratch directory, ".." defused, so no input touches files outside it.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_replace.h"
#include "common/base/clock.h"
#include "common/rpc/auth.h"
#include "common/rpc/worker_credential.h"
#include "coordinator/checkpoints/catalog.h"
#include "coordinator/checkpoints/job_lookup.h"
#include "coordinator/client_service.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/rendezvous/rank_credentials.h"
#include "coordinator/store/store.h"
#include "coordinator/worker_service.h"
#include "coordinator/workers/registry.h"
#include "grpcpp/test/server_context_test_spouse.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/testutil/service_spec.h"
#include "tests/testutil/test_checkpoint_files.h"

namespace mt::coordinator {
namespace {

constexpr char kToken[] = "fuzz-token-0123456789abcdef";
constexpr char kSubmitToken[] = "fuzz-submit-0123456789abcdef";  // a submit token's, "alice"
constexpr char kRankKey[] = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

std::string Confine(const std::string& path) {
  if (path.empty()) return path;
  const std::string safe = absl::StrReplaceAll(path, {{"..", "__"}});
  return safe[0] == '/' ? fuzz::ScratchDir() + "/root" + safe : safe;
}

void ConfineSpec(mt::v1::JobSpec* spec) {
  auto* c = spec->mutable_checkpoint();
  c->set_save_dir(Confine(c->save_dir()));
  c->set_load_dir(Confine(c->load_dir()));
  auto* l = spec->mutable_logging();
  l->set_tensorboard_dir(Confine(l->tensorboard_dir()));
}

void Die(const absl::Status& s) {
  std::fprintf(stderr, "coordinator_rpc_fuzzer setup: %s\n", std::string(s.message()).c_str());
  std::abort();
}

RankCredentials MakeRankCredentials() {
  absl::StatusOr<RankCredentials> c = RankCredentials::FromKey(kRankKey);
  if (!c.ok()) Die(c.status());
  return *std::move(c);
}

// One coordinator's services, as Server::Create wires them (without the gRPC server).
struct Coordinator {
  Coordinator()
      : auth({rpc::TokenEntry{rpc::Role::kAdmin, "fuzz", kToken},
              rpc::TokenEntry{rpc::Role::kSubmit, "alice", kSubmitToken}}),
        registry(&clock, absl::Seconds(30)),
        rank_credentials(MakeRankCredentials()) {
    const std::string state = fuzz::ScratchDir() + "/state";
    const std::string cwd = fuzz::ScratchDir() + "/root";
    if (::mkdir(cwd.c_str(), 0700) != 0 || ::chdir(cwd.c_str()) != 0) std::abort();
    auto s = Store::Open(state);
    if (!s.ok()) Die(s.status());
    store = std::move(*s);
    JobManagerOptions options;
    options.coordinator_address = "127.0.0.1:1";
    options.max_jobs = 2000;
    options.rank_credentials = &rank_credentials;
    auto j = JobManager::Create(store.get(), &registry, &clock, options);
    if (!j.ok()) Die(j.status());
    jobs = std::move(*j);
    checkpoint_jobs = std::make_unique<JobManagerCheckpointJobs>(jobs.get());
    auto c = CheckpointCatalog::Create(store.get(), checkpoint_jobs.get(), &clock);
    if (!c.ok()) Die(c.status());
    catalog = std::move(*c);
    client = std::make_unique<ClientServiceImpl>(&auth, &registry, jobs.get(), &clock, clock.Now());
    client->set_catalog(catalog.get());
    worker = std::make_unique<WorkerServiceImpl>(&auth, &registry, jobs.get(), absl::Seconds(5));
    worker->set_catalog(catalog.get());
    worker->set_rank_credentials(&rank_credentials);
    EnsureLiveJob();
  }

  // Every 64 inputs: when the job set up last has ended (or none was), registers a fresh CPU
  // worker in place of the previous one and places a new job on it, taking its assignment as
  // the worker daemon would. Ended jobs beyond 500 are pruned, and at most 4096 workers are
  // ever set up, so a long run's state stays bounded.
  void EnsureLiveJob() {
    if (calls++ % 64 != 0) return;
    SetUpJob();
    EnsureCheckpoint();
  }

  // EnsureLiveJob's job: kept while it is scheduled or running.
  void SetUpJob() {
    if (!job_id.empty()) {
      absl::StatusOr<mt::v1::Job> job = jobs->Get(job_id, /*include_events=*/false);
      if (job.ok() && (job->state() == mt::v1::JOB_STATE_SCHEDULED ||
                       job->state() == mt::v1::JOB_STATE_RUNNING)) {
        return;
      }
    }
    job_id.clear();
    jobs->PruneEnded(500, absl::ZeroDuration());
    if (nodes >= 4096) return;
    if (!setup_worker.empty()) (void)registry.Deregister(setup_worker);
    mt::v1::RegisterRequest r;
    r.mutable_resources()->set_node("fuzz-node-" + std::to_string(++nodes));
    r.mutable_resources()->set_gpu_index(-1);
    r.mutable_resources()->set_device_name("cpu");
    r.mutable_resources()->set_memory_bytes(int64_t{8} << 30);
    r.mutable_resources()->set_cpu_cores(1);
    WorkerRegistry::Issued issued;
    absl::StatusOr<mt::v1::Worker> w = jobs->RegisterWorker(r, &issued);
    if (!w.ok()) return;
    setup_worker = w->id();
    sessions[w->id()] = issued.session;
    // Owned by the submit token's name, so that its calls pass the ownership checks.
    if (!jobs->Submit(testutil::ServiceJobSpec("fuzz-live"), "", "alice").ok()) return;
    for (const mt::v1::WorkerCommand& command : jobs->TakeCommands(w->id(), absl::ZeroDuration())) {
      if (!command.has_assign()) continue;
      job_id = command.assign().job_id();
      attempt = command.assign().attempt();
      rank = command.assign().coordinates().rank();
    }
  }

  // EnsureLiveJob's checkpoint: when the one imported last is gone (an input deleted it), writes
  // a one-tensor mt checkpoint under the scratch directory and imports it under the live job,
  // so that the checkpoint RPCs (and their ownership checks) have a real entry to act on. At
  // most 4096 are ever written.
  void EnsureCheckpoint() {
    if (!checkpoint_id.empty()) {
      absl::StatusOr<mt::v1::Checkpoint> c = catalog->Get(checkpoint_id);
      if (c.ok() && c->state() != mt::v1::CHECKPOINT_STATE_DELETED) return;
    }
    checkpoint_id.clear();
    if (job_id.empty() || checkpoints >= 4096) return;
    absl::StatusOr<std::string> dir = testutil::MakeTestCheckpoint(
        fuzz::ScratchDir() + "/ckpt-" + std::to_string(++checkpoints), job_id, 1, 0.5,
        /*commit=*/true, /*real_shard=*/true);
    if (!dir.ok()) return;
    mt::v1::ImportCheckpointRequest r;
    r.set_directory(*dir);
    r.set_job_id(job_id);
    absl::StatusOr<mt::v1::Checkpoint> c = catalog->Import(r);
    if (c.ok()) checkpoint_id = c->id();
  }

  // The rank credential header of a rendezvous call naming (job, attempt, rank), per `mode`
  // (byte 1, bits 3-4); mode 1 is the set-up job's rank, whatever the request names.
  std::string RankCredentialFor(int mode, const std::string& job, int job_attempt,
                                int job_rank) const {
    switch (mode) {
      case 0:
        return rank_credentials.Issue(job, job_attempt, job_rank);
      case 1:
        return rank_credentials.Issue(job_id, attempt, rank);
      case 2:
        return rank_credentials.Issue(job, job_attempt, job_rank + 1);
      default:
        return "";
    }
  }

  RealClock clock;
  rpc::Authenticator auth;
  WorkerRegistry registry;
  std::unique_ptr<Store> store;
  std::unique_ptr<JobManager> jobs;
  std::unique_ptr<JobManagerCheckpointJobs> checkpoint_jobs;
  std::unique_ptr<CheckpointCatalog> catalog;
  std::unique_ptr<ClientServiceImpl> client;
  std::unique_ptr<WorkerServiceImpl> worker;
  RankCredentials rank_credentials;
  std::map<std::string, std::string> sessions;  // worker id -> session of its registration
  int nodes = 0;
  uint64_t calls = 0;
  std::string setup_worker;   // the worker EnsureLiveJob registered last
  std::string job_id;         // its live job ("" when none could be set up)
  std::string checkpoint_id;  // the checkpoint EnsureCheckpoint imported last
  int checkpoints = 0;
  int attempt = 0;
  int rank = 0;
};

// Who a call claims to be, from byte 1 of the input.
struct Identity {
  std::string authorization;  // "Bearer ...", or empty for none
  int rank_mode = 0;          // bits 3-4
  bool session = true;        // bit 5 clear
};

using Spouse = grpc::testing::ServerContextTestSpouse;

void AddRank(const Coordinator& c, const Identity& id, const std::string& job, int attempt,
             int rank, Spouse* spouse) {
  const std::string credential = c.RankCredentialFor(id.rank_mode, job, attempt, rank);
  if (!credential.empty()) spouse->AddClientMetadata(rpc::kRankCredentialHeader, credential);
}

void AddSession(const Coordinator& c, const Identity& id, const std::string& worker_id,
                Spouse* spouse) {
  auto it = c.sessions.find(worker_id);
  if (id.session && it != c.sessions.end()) {
    spouse->AddClientMetadata(rpc::kWorkerSessionHeader, it->second);
  }
}

// The metadata beyond the bearer token that a request of this type carries.
template <typename Req>
void AddIdentity(const Coordinator&, const Identity&, const Req&, Spouse*) {}
void AddIdentity(const Coordinator& c, const Identity& id, const mt::v1::RendezvousSetRequest& r,
                 Spouse* s) {
  AddRank(c, id, r.job_id(), r.attempt(), r.rank(), s);
}
void AddIdentity(const Coordinator& c, const Identity& id, const mt::v1::RendezvousGetRequest& r,
                 Spouse* s) {
  AddRank(c, id, r.job_id(), r.attempt(), r.rank(), s);
}
void AddIdentity(const Coordinator& c, const Identity& id, const mt::v1::RendezvousAddRequest& r,
                 Spouse* s) {
  AddRank(c, id, r.job_id(), r.attempt(), r.rank(), s);
}
void AddIdentity(const Coordinator& c, const Identity& id, const mt::v1::HeartbeatRequest& r,
                 Spouse* s) {
  AddSession(c, id, r.worker_id(), s);
}
void AddIdentity(const Coordinator& c, const Identity& id, const mt::v1::DeregisterRequest& r,
                 Spouse* s) {
  AddSession(c, id, r.worker_id(), s);
}
void AddIdentity(const Coordinator& c, const Identity& id, const mt::v1::RankExitReport& r,
                 Spouse* s) {
  AddSession(c, id, r.worker_id(), s);
}

// Parses the request, lets `fix` confine it, and calls `handler` with a context carrying the
// identity's bearer token (none when empty) and the request's rank credential or worker
// session. Returns whether the handler answered OK (with `response` filled).
template <typename Req, typename Resp, typename Fix, typename Handler>
bool Call(const Coordinator& c, absl::string_view bytes, const Identity& id, Fix fix,
          Handler handler, Resp* response) {
  Req request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return false;
  fix(&request);
  grpc::ServerContext context;
  Spouse spouse(&context);
  if (!id.authorization.empty()) spouse.AddClientMetadata("authorization", id.authorization);
  AddIdentity(c, id, request, &spouse);
  return handler(&context, &request, response).ok();
}

template <typename Req>
void NoFix(Req*) {}

#define MT_RPC(svc, method, Req, Resp, fix)                                         \
  do {                                                                              \
    mt::v1::Resp response;                                                          \
    Call<mt::v1::Req>(                                                              \
        c, body, id, fix,                                                           \
        [&](grpc::ServerContext* ctx, const mt::v1::Req* req, mt::v1::Resp* resp) { \
          return c.svc->method(ctx, req, resp);                                     \
        },                                                                          \
        &response);                                                                 \
  } while (false)

void Dispatch(Coordinator& c, uint8_t which, const Identity& id, absl::string_view body) {
  switch (which % 28) {
    case 0:
      MT_RPC(client, SubmitJob, SubmitJobRequest, SubmitJobResponse,
             [](mt::v1::SubmitJobRequest* r) { ConfineSpec(r->mutable_spec()); });
      break;
    case 1:
      MT_RPC(client, GetJob, GetJobRequest, Job, NoFix<mt::v1::GetJobRequest>);
      break;
    case 2:
      MT_RPC(client, ListJobs, ListJobsRequest, ListJobsResponse, NoFix<mt::v1::ListJobsRequest>);
      break;
    case 3:
      MT_RPC(client, CancelJob, CancelJobRequest, Job, NoFix<mt::v1::CancelJobRequest>);
      break;
    case 4:
      MT_RPC(client, GetJobLogs, GetJobLogsRequest, GetJobLogsResponse,
             NoFix<mt::v1::GetJobLogsRequest>);
      break;
    case 5:
      MT_RPC(client, ListWorkers, ListWorkersRequest, ListWorkersResponse,
             NoFix<mt::v1::ListWorkersRequest>);
      break;
    case 6:
      MT_RPC(client, DrainWorker, DrainWorkerRequest, Worker, NoFix<mt::v1::DrainWorkerRequest>);
      break;
    case 7:
      MT_RPC(client, PlanJob, PlanJobRequest, PlanJobResponse,
             [](mt::v1::PlanJobRequest* r) { ConfineSpec(r->mutable_spec()); });
      break;
    case 8:
      MT_RPC(client, GetClusterInfo, GetClusterInfoRequest, ClusterInfo,
             NoFix<mt::v1::GetClusterInfoRequest>);
      break;
    case 9:
      MT_RPC(client, ListCheckpoints, ListCheckpointsRequest, ListCheckpointsResponse,
             NoFix<mt::v1::ListCheckpointsRequest>);
      break;
    case 10:
      MT_RPC(client, GetCheckpoint, GetCheckpointRequest, Checkpoint,
             NoFix<mt::v1::GetCheckpointRequest>);
      break;
    case 11:
      MT_RPC(client, DeleteCheckpoint, DeleteCheckpointRequest, Checkpoint,
             NoFix<mt::v1::DeleteCheckpointRequest>);
      break;
    case 12:
      MT_RPC(client, VerifyCheckpoint, VerifyCheckpointRequest, VerifyCheckpointResponse,
             NoFix<mt::v1::VerifyCheckpointRequest>);
      break;
    case 13:
      MT_RPC(
          client, ExportCheckpoint, ExportCheckpointRequest, ExportCheckpointResponse,
          [](mt::v1::ExportCheckpointRequest* r) { r->set_output_dir(Confine(r->output_dir())); });
      break;
    case 14:
      MT_RPC(client, ImportCheckpoint, ImportCheckpointRequest, Checkpoint,
             [](mt::v1::ImportCheckpointRequest* r) { r->set_directory(Confine(r->directory())); });
      break;
    case 15:
      MT_RPC(worker, ReportRankExit, RankExitReport, RankExitResponse,
             NoFix<mt::v1::RankExitReport>);
      break;
    case 16:
      MT_RPC(worker, RendezvousSet, RendezvousSetRequest, RendezvousSetResponse,
             NoFix<mt::v1::RendezvousSetRequest>);
      break;
    case 17:
      MT_RPC(worker, RendezvousGet, RendezvousGetRequest, RendezvousGetResponse,
             [](mt::v1::RendezvousGetRequest* r) {
               r->mutable_timeout()->set_seconds(0);  // bounded: 1 ms, never 300 s
               r->mutable_timeout()->set_nanos(1000000);
             });
      break;
    case 18:
      MT_RPC(worker, RendezvousAdd, RendezvousAddRequest, RendezvousAddResponse,
             NoFix<mt::v1::RendezvousAddRequest>);
      break;
    case 19: {  // the session it gets is what its later calls present
      mt::v1::RegisterResponse response;
      if (Call<mt::v1::RegisterRequest>(
              c, body, id, NoFix<mt::v1::RegisterRequest>,
              [&](grpc::ServerContext* ctx, const mt::v1::RegisterRequest* req,
                  mt::v1::RegisterResponse* resp) { return c.worker->Register(ctx, req, resp); },
              &response)) {
        c.sessions[response.worker_id()] = response.session();
      }
      break;
    }
    case 20:
      MT_RPC(worker, Heartbeat, HeartbeatRequest, HeartbeatResponse,
             NoFix<mt::v1::HeartbeatRequest>);
      break;
    case 21:
      MT_RPC(worker, Deregister, DeregisterRequest, DeregisterResponse,
             NoFix<mt::v1::DeregisterRequest>);
      break;
    case 22: {  // ReportProgress's handling of one report (its stream reader aside)
      mt::v1::RankReport report;
      if (!report.ParseFromArray(body.data(), static_cast<int>(body.size()))) return;
      auto* cp = report.mutable_checkpoint();
      if (report.has_checkpoint()) cp->set_directory(Confine(cp->directory()));
      if (c.jobs->OnRankReport(report).ok() && report.has_checkpoint()) {
        (void)c.catalog->OnCheckpointReport(report);
      }
      break;
    }
    case 23: {  // StreamAssignments' handling: the worker's queued commands
      mt::v1::StreamAssignmentsRequest request;
      if (!request.ParseFromArray(body.data(), static_cast<int>(body.size()))) return;
      (void)c.jobs->TakeCommands(request.worker_id(), absl::ZeroDuration());
      break;
    }
    case 24:
      MT_RPC(client, DeleteJob, DeleteJobRequest, Job, NoFix<mt::v1::DeleteJobRequest>);
      break;
    case 25: {  // WatchJob's handling: one snapshot, without waiting
      mt::v1::WatchJobRequest request;
      if (!request.ParseFromArray(body.data(), static_cast<int>(body.size()))) return;
      (void)c.jobs->WaitForChange(request.job_id(), 0, absl::ZeroDuration());
      break;
    }
    case 26:  // an eval job of a catalog checkpoint (GenerateText's stream has no unary form)
      MT_RPC(client, EvaluateCheckpoint, EvaluateCheckpointRequest, SubmitJobResponse,
             [](mt::v1::EvaluateCheckpointRequest* r) {
               r->set_checkpoint(Confine(r->checkpoint()));
               r->mutable_eval()->set_data_path(Confine(r->eval().data_path()));
             });
      break;
    default: {  // DownloadCheckpoint's handling: every chunk, sent nowhere
      mt::v1::DownloadCheckpointRequest request;
      if (!request.ParseFromArray(body.data(), static_cast<int>(body.size()))) return;
      (void)c.catalog->Download(request,
                                [](const mt::v1::DownloadCheckpointChunk&) { return true; });
      break;
    }
  }
}

}  // namespace
}  // namespace mt::coordinator

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* coordinator = new mt::coordinator::Coordinator();  // lives for the process
  if (size < 2) return 0;
  const absl::string_view body = mt::fuzz::AsView(data + 2, size - 2);
  mt::coordinator::Identity id;
  id.authorization = std::string("Bearer ") + mt::coordinator::kToken;
  if (data[1] % 8 == 5) id.authorization = std::string("Bearer ") + mt::coordinator::kSubmitToken;
  if (data[1] % 8 == 6) id.authorization.clear();
  if (data[1] % 8 == 7) id.authorization = std::string(body.substr(0, 40));
  id.rank_mode = (data[1] >> 3) & 3;
  id.session = ((data[1] >> 5) & 1) == 0;
  mt::coordinator::Dispatch(*coordinator, data[0], id, body);
  coordinator->EnsureLiveJob();
  return 0;
}
