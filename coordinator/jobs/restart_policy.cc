#include "coordinator/jobs/restart_policy.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mt::coordinator {

FailureDecision DecideOnFailure(const mt::v1::Job& job, const std::string& cause) {
  FailureDecision d;
  const int max_restarts = job.spec().restart().max_restarts();
  if (job.spec().checkpoint().save_dir().empty()) {
    d.reason = absl::StrCat(cause,
                            "; not restarted: the job saves no checkpoints (set "
                            "checkpoint.save_dir to restart automatically)");
  } else if (job.attempt() >= max_restarts) {
    d.reason = max_restarts == 0 ? absl::StrCat(cause, "; not restarted: restart.max_restarts is 0")
                                 : absl::StrCat(cause, "; not restarted: all ", max_restarts,
                                                " restarts (restart.max_restarts) are used up");
  } else {
    d.restart = true;
    d.reason = absl::StrCat(cause, "; stopping the other ranks to restart (restart ",
                            job.attempt() + 1, " of at most ", max_restarts, ")");
  }
  return d;
}

bool IsOwnFailure(const std::string& cause) {
  return absl::StartsWith(cause, "rank ") && absl::StrContains(cause, " failed: ") &&
         !absl::StrContains(cause, "killed by signal");
}

RequeueDecision DecideRequeue(const mt::v1::Job& job, const std::string& cause,
                              const std::optional<FoundCheckpoint>& latest,
                              const std::string& skipped) {
  RequeueDecision d;
  const int64_t step = latest.has_value() ? latest->step : 0;
  const std::string damaged = skipped.empty() ? "" : absl::StrCat(" (skipped: ", skipped, ")");
  if (job.attempt() > 0 && step <= job.resume_step() && IsOwnFailure(cause)) {
    d.reason = absl::StrCat(
        cause, "; not restarted: failed again with no new checkpoint since restart ", job.attempt(),
        job.resume_step() > 0 ? absl::StrCat(" (which resumed from step ", job.resume_step(), ")")
                              : std::string(" (which started over: there was no checkpoint)"),
        damaged);
    return d;
  }
  if (!latest.has_value() && !skipped.empty()) {
    // Checkpoints exist but none loads: starting over would silently throw the run away.
    d.reason = absl::StrCat(cause, "; not restarted: no checkpoint in ",
                            job.spec().checkpoint().save_dir(), " loads: ", skipped);
    return d;
  }
  d.requeue = true;
  if (latest.has_value() && latest->step > 0) {
    d.resume_from = latest->dir;
    d.resume_step = latest->step;
    d.reason = absl::StrCat("restart ", job.attempt() + 1, " from ", latest->dir, " (step ",
                            latest->step, ")", damaged, " after: ", cause);
  } else {
    const std::string start = job.spec().checkpoint().load_dir().empty()
                                  ? std::string("from scratch")
                                  : absl::StrCat("from ", job.spec().checkpoint().load_dir());
    d.reason = absl::StrCat("restart ", job.attempt() + 1, " ", start,
                            " (no checkpoint in save_dir yet)", damaged, " after: ", cause);
  }
  return d;
}

}  // namespace mt::coordinator
