// The job state machine (mt.v1.JobState). The one table of allowed transitions lives in
// job_state.cc; everything that changes a job's state goes through CheckTransition.
//
//   PENDING ──schedule──▶ SCHEDULED ──all ranks training──▶ RUNNING ──all ranks done──▶ SUCCEEDED
//    │  ▲                    │                                 │
//    │  └─ requeue (attempt+1, resume_from) ── RESTARTING ◀────┴── rank/worker failure
//    │                       │                     │               (restarts left)
//    └──── cancel ───────────┴─────────┬───────────┘
//                                      ▼
//                                 CANCELLED            FAILED ◀── failure, no restarts left
//
// PENDING:    accepted, queued until enough free workers exist (also a restart waiting for
//             capacity).
// SCHEDULED:  ranks placed; assignments sent; ranks starting and joining the rendezvous.
// RUNNING:    every rank reported training.
// RESTARTING: a rank of a SCHEDULED or RUNNING job failed or its worker was lost; the other
//             ranks are being stopped. Once every rank ended the job goes back to PENDING as
//             attempt + 1, resuming from the newest checkpoint of checkpoint.save_dir that
//             verifies, or to FAILED when the restart policy says no (no new checkpoint since
//             the last restart, max_restarts used up, only damaged checkpoints). A job without
//             checkpoint.save_dir never restarts; one with save_dir but no checkpoint yet starts
//             over from its own start (load_dir or scratch), once. Rules: restart_policy.h.
// SUCCEEDED, FAILED, CANCELLED: terminal; nothing leaves them.
#ifndef MT_COORDINATOR_JOBS_JOB_STATE_H_
#define MT_COORDINATOR_JOBS_JOB_STATE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "mt/v1/job.pb.h"

namespace mt::coordinator {

// OK when `from -> to` is an edge of the table; FAILED_PRECONDITION naming both otherwise.
absl::Status CheckTransition(mt::v1::JobState from, mt::v1::JobState to);
bool IsTerminal(mt::v1::JobState state);
// Every allowed edge, for tests and documentation.
std::vector<std::pair<mt::v1::JobState, mt::v1::JobState>> AllowedTransitions();
// "RUNNING" for JOB_STATE_RUNNING.
std::string ShortName(mt::v1::JobState state);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOBS_JOB_STATE_H_
