// Fuzz target: every coordinator RPC's request handling, in process. The services of a real
// coordinator (JobManager, WorkerRegistry, CheckpointCatalog on a SQLite store in a scratch
// directory) are called directly: byte 0 picks the RPC, byte 1 the credentials (the right
// bearer token, none, or the rest of a wrong one), the rest is the request's wire encoding
// (ParseFromArray; an input that does not parse is dropped). State persists across inputs, so
// sequences of calls (register, submit, report, rendezvous, cancel) are reached.
//
// The three server-streaming RPCs (WatchJob, StreamAssignments, DownloadCheckpoint) need a
// live stream; StreamAssignments' and ReportProgress's handling is reached through what their
// handlers call (JobManager::TakeCommands, OnRankReport, CheckpointCatalog::OnCheckpointReport).
//
// Paths a request names (save/load/TensorBoard dirs, import/export/report directories) are
// moved under the scratch directory, ".." defused, so no input touches files outside it.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_replace.h"
#include "common/base/clock.h"
#include "common/rpc/auth.h"
#include "coordinator/checkpoints/catalog.h"
#include "coordinator/checkpoints/job_lookup.h"
#include "coordinator/client_service.h"
#include "coordinator/jobs/job_manager.h"
#include "coordinator/store/store.h"
#include "coordinator/worker_service.h"
#include "coordinator/workers/registry.h"
#include "grpcpp/test/server_context_test_spouse.h"
#include "tests/fuzz/fuzz_util.h"

namespace mt::coordinator {
namespace {

constexpr char kToken[] = "fuzz-token-0123456789abcdef";

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

// One coordinator's services, as Server::Create wires them (without the gRPC server).
struct Coordinator {
  Coordinator()
      : auth({rpc::TokenEntry{rpc::Role::kAdmin, "fuzz", kToken}}),
        registry(&clock, absl::Seconds(30)) {
    const std::string state = fuzz::ScratchDir() + "/state";
    const std::string cwd = fuzz::ScratchDir() + "/root";
    if (::mkdir(cwd.c_str(), 0700) != 0 || ::chdir(cwd.c_str()) != 0) std::abort();
    auto s = Store::Open(state);
    if (!s.ok()) Die(s.status());
    store = std::move(*s);
    JobManagerOptions options;
    options.coordinator_address = "127.0.0.1:1";
    options.max_jobs = 2000;
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
};

// Parses the request, lets `fix` confine it, and calls `handler` with a context carrying
// `authorization` (none when empty).
template <typename Req, typename Resp, typename Fix, typename Handler>
void Call(absl::string_view bytes, const std::string& authorization, Fix fix, Handler handler) {
  Req request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  fix(&request);
  grpc::ServerContext context;
  grpc::testing::ServerContextTestSpouse spouse(&context);
  if (!authorization.empty()) spouse.AddClientMetadata("authorization", authorization);
  Resp response;
  (void)handler(&context, &request, &response);
}

template <typename Req>
void NoFix(Req*) {}

#define MT_RPC(svc, method, Req, Resp, fix)                                       \
  Call<mt::v1::Req, mt::v1::Resp>(                                                \
      body, authorization, fix,                                                   \
      [&](grpc::ServerContext* ctx, const mt::v1::Req* req, mt::v1::Resp* resp) { \
        return c.svc->method(ctx, req, resp);                                     \
      })

void Dispatch(Coordinator& c, uint8_t which, const std::string& authorization,
              absl::string_view body) {
  switch (which % 24) {
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
    case 19:
      MT_RPC(worker, Register, RegisterRequest, RegisterResponse, NoFix<mt::v1::RegisterRequest>);
      break;
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
    default: {  // StreamAssignments' handling: the worker's queued commands
      mt::v1::StreamAssignmentsRequest request;
      if (!request.ParseFromArray(body.data(), static_cast<int>(body.size()))) return;
      (void)c.jobs->TakeCommands(request.worker_id(), absl::ZeroDuration());
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
  std::string authorization = std::string("Bearer ") + mt::coordinator::kToken;
  if (data[1] % 8 == 6) authorization.clear();
  if (data[1] % 8 == 7) authorization = std::string(body.substr(0, 40));
  mt::coordinator::Dispatch(*coordinator, data[0], authorization, body);
  return 0;
}
