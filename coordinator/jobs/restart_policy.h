// When a failed job restarts by itself, and from where (JobSpec.restart, issue #7 part 6).
// Pure functions of the job and of what its save directory holds; the job manager applies
// them (job_manager.cc, FailOrRestart and AdvanceRestarts).
//
// The rules, as a Megatron-LM user relaunching with `--load` = `--save` would expect:
//   1. A rank failure or a lost worker restarts the job only when it saves checkpoints
//      (checkpoint.save_dir, Megatron's --save) and restarts are left (attempt <
//      restart.max_restarts, default 3). Otherwise the job fails with the cause and why it was
//      not restarted. A job without save_dir is never restarted: re-running all of its steps
//      silently is not what a user who did not ask for checkpoints expects.
//   2. The other ranks are stopped first (RESTARTING); once every rank of the attempt ended
//      the job resumes from the newest checkpoint of save_dir that verifies (size and SHA-256
//      of every file, falling back past damaged ones), as attempt + 1 through the queue
//      (PENDING waits for capacity, possibly on other workers).
//   3. No checkpoint in save_dir yet: the job restarts from its own start (checkpoint.load_dir
//      or scratch), as a relaunched Megatron with an empty --load directory does.
//   4. A failure of the job's own (a rank that exited with an error) with no checkpoint newer
//      than the one the attempt resumed from (for the first attempt: none) fails the job with
//      that reason instead of looping. So a job that crashes deterministically before its
//      first save is tried at most twice. Failures of its surroundings (a lost worker or node,
//      a rank gone from its worker, a rank killed by a signal, a hang) say nothing of the job
//      and restart it from the same checkpoint, within max_restarts: two faults of a flaky
//      node within one save interval must not end a run (found by the chaos soak).
#ifndef MT_COORDINATOR_JOBS_RESTART_POLICY_H_
#define MT_COORDINATOR_JOBS_RESTART_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "mt/v1/job.pb.h"

namespace mt::coordinator {

// Whether `cause` (as the job manager words it) is the job's own failure for rule 4: "rank R
// on W failed: <message>" where the message is not a death by signal. Lost workers ("worker
// ..."), hangs ("hung ...") and signals are not.
bool IsOwnFailure(const std::string& cause);

// Rule 1, when `cause` ("rank 1 on w-2 failed: exit code 1 ...") ended a rank of `job`.
struct FailureDecision {
  bool restart = false;
  // The job's reason for RESTARTING (restart) or FAILED (not).
  std::string reason;
};
FailureDecision DecideOnFailure(const mt::v1::Job& job, const std::string& cause);

// The newest checkpoint of save_dir that verifies, as the coordinator found it.
struct FoundCheckpoint {
  std::string dir;
  int64_t step = 0;
};

// Rules 2-4, once every rank of the failed attempt ended. `latest` is nullopt when save_dir
// holds no loadable checkpoint; `skipped` lists damaged ones passed over (for the reason).
// Checkpoints that exist but of which none loads (latest nullopt, skipped not empty) fail the
// job: starting over would silently discard the run.
struct RequeueDecision {
  bool requeue = false;
  std::string resume_from;  // for Job.resume_from and Assignment.resume_from
  int64_t resume_step = 0;
  // The reason for PENDING (requeue) or FAILED (not).
  std::string reason;
};
RequeueDecision DecideRequeue(const mt::v1::Job& job, const std::string& cause,
                              const std::optional<FoundCheckpoint>& latest,
                              const std::string& skipped);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOBS_RESTART_POLICY_H_
