// `mt-train --assignment FILE`: one rank of a job, as the worker daemon starts it
// (worker/daemon/rank_process.h). The assignment (mt.v1.Assignment) carries everything: the
// spec, the layout, this rank's coordinates, the coordinator for the rendezvous.
//
// A thin front end over the rank session (session.h):
//   1. report STARTING; join the job's process groups (worker/parallel/dist.h); resolve the
//      spec's global batch for the data-parallel size (spec::ResolveForLayout: an older
//      coordinator's assignment leaves it open)
//   2. run the session from the assignment's resume_from, else checkpoint.load_dir, with
//      this DP rank's data, the job's own store as the save exchange (never the
//      coordinator: checkpoint/store_exchange.h), and SIGTERM/SIGINT as the
//      stop; PipeReporter (pipe_reporter.h) reports over MT_REPORT_FD
//      (worker/report/report_channel.h) and logs the damaged checkpoints skipped
//   3. exit 0 when trained; 1 on an error (the last line of the log says why); 143 when
//      stopped by SIGTERM (130 for SIGINT) before the end
//
// MT_TOKEN_FILE names the bearer token for the coordinator, when it wants one.
#ifndef MT_WORKER_TRAIN_RANK_COMMAND_H_
#define MT_WORKER_TRAIN_RANK_COMMAND_H_

#include <string>
#include <vector>

namespace mt::train {

int RunRankCommand(const std::vector<std::string>& args);

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_RANK_COMMAND_H_
