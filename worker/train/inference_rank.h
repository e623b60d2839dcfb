// The rank of an evaluation or generation job (JobSpec.inference; `mtctl eval|generate`). On
// one rank: one process, one device, no process groups; it runs what `mt-worker
// eval|generate` runs with the task's flags (common/spec/inference.h builds them), so a job
// and the local command compute the same numbers and text. An eval job past one rank joins the
// job's process groups and evaluates its shard (sharded_eval.h); a generation job past one rank
// (TP ranks) joins them and decodes with its shard (sharded_generate.h), and only its TP rank 0
// reports the text (the others send beacons only). Each reports to its daemon over the report
// pipe:
//   - phase EVALUATING once it starts (the job turns RUNNING), and a progress beacon (activity
//     EVAL) per micro-batch evaluated or text piece generated, for the hang detector;
//   - eval: one progress report with the result (validation_loss, validation_perplexity,
//     evaluated_tokens, validation_step = the checkpoint's step); the daemon repeats it in the
//     exit report, so the coordinator has it before the job succeeds;
//   - generate: RankReport.generated with each sample's new text as it comes, then one message
//     per sample with done, its finish reason and token count.
// The result also goes to the log as the local command's JSON line.
#ifndef MT_WORKER_TRAIN_INFERENCE_RANK_H_
#define MT_WORKER_TRAIN_INFERENCE_RANK_H_

#include <functional>

#include "absl/status/statusor.h"
#include "mt/v1/job_spec.pb.h"
#include "mt/v1/worker_service.pb.h"
#include "worker/parallel/dist.h"
#include "worker/report/report_channel.h"
#include "worker/train/session.h"

namespace mt::train {

// A rank's place in its job once it joined the process groups: the groups, and the session's
// load, restore and trainer options for its coordinates (rank_command.cc builds them).
struct RankPlace {
  parallel::Distributed distributed;
  SessionConfig session;
};

// Returns the process exit code: 0 done, 1 failed (the log's last line says why). `join` is
// called once, by an eval or generation job's rank past one rank.
int RunInferenceRank(const mt::v1::JobSpec& spec, const mt::v1::Assignment& assignment,
                     const worker::ReportWriter& writer,
                     const std::function<absl::StatusOr<RankPlace>()>& join);

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_INFERENCE_RANK_H_
