#include "coordinator/rpc_roles.h"

namespace mt::coordinator {

const std::vector<std::pair<absl::string_view, rpc::Access>>& RpcAccessTable() {
  using rpc::Access;
  static const auto* const kTable = new std::vector<std::pair<absl::string_view, Access>>{
      // ClientService: reading the cluster's state.
      {"GetJob", Access::kRead},
      {"ListJobs", Access::kRead},
      {"WatchJob", Access::kRead},
      {"GetJobLogs", Access::kRead},
      {"PlanJob", Access::kRead},
      {"ListWorkers", Access::kRead},
      {"GetClusterInfo", Access::kRead},
      {"ListCheckpoints", Access::kRead},
      {"GetCheckpoint", Access::kRead},
      // Running jobs. A submit token acts only on the jobs it submitted (Job.owner; the
      // handlers check it through coordinator/job_access.h); an admin on every job.
      {"SubmitJob", Access::kSubmit},
      {"CancelJob", Access::kSubmit},
      {"DeleteJob", Access::kSubmit},
      {"VerifyCheckpoint", Access::kSubmit},
      {"DownloadCheckpoint", Access::kSubmit},
      // Only the checkpoints of the caller's own jobs (an admin's: any), checked by the
      // handlers like CancelJob's; export writes inside the allowed roots only.
      {"DeleteCheckpoint", Access::kSubmit},
      {"ExportCheckpoint", Access::kSubmit},
      // The operator's: the cluster, and registering a directory of the coordinator's file
      // system (deleting an imported entry removes its files there).
      {"DrainWorker", Access::kAdmin},
      {"ImportCheckpoint", Access::kAdmin},
      // Evaluation and generation jobs from a checkpoint (`mtctl eval|generate`): jobs, as
      // SubmitJob's, owned by the caller.
      {"EvaluateCheckpoint", Access::kSubmit},
      {"GenerateText", Access::kSubmit},
      // WorkerService: workers and their ranks.
      {"Register", Access::kWorker},
      {"Heartbeat", Access::kWorker},
      {"StreamAssignments", Access::kWorker},
      {"ReportProgress", Access::kWorker},
      {"ReportRankExit", Access::kWorker},
      {"RendezvousSet", Access::kWorker},
      {"RendezvousGet", Access::kWorker},
      {"RendezvousAdd", Access::kWorker},
      {"Deregister", Access::kWorker},
  };
  return *kTable;
}

rpc::Access RequiredAccess(absl::string_view method) {
  for (const auto& [name, access] : RpcAccessTable()) {
    if (name == method) return access;
  }
  return rpc::Access::kAdmin;
}

}  // namespace mt::coordinator
