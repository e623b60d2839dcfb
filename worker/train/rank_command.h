// `mt-train --assignment FILE`: one rank of a job, as the worker daemon starts it
// (worker/agent/rank_process.h). The assignment (mt.v1.Assignment) carries everything: the
// defaulted spec, the layout, this rank's coordinates, the coordinator for the rendezvous.
//
//   1. report STARTING; join the job's process groups (worker/parallel/dist.h)
//   2. pick the checkpoint to start from (the assignment's resume_from, else
//      checkpoint.load_dir; verified, falling back past damaged ones), build this DP rank's
//      data loaders at its data position and the trainer (worker/engine), load it
//   3. report TRAINING, then progress every log_interval steps and after each evaluation;
//      with checkpoint.save_dir, save every save_interval steps, at the end, and where
//      SIGTERM stopped the run (every rank stops at the same step), reporting each save
//   4. exit 0 when trained; 1 on an error (the last line of the log says why); 143 when
//      stopped by SIGTERM (130 for SIGINT) before the end
//
// Reports travel over MT_REPORT_FD (worker/agent/report_channel.h). MT_TOKEN_FILE names the
// bearer token for the coordinator, when it wants one.
#ifndef MT_WORKER_TRAIN_RANK_COMMAND_H_
#define MT_WORKER_TRAIN_RANK_COMMAND_H_

#include <string>
#include <vector>

namespace mt::train {

int RunRankCommand(const std::vector<std::string>& args);

}  // namespace mt::train

#endif  // MT_WORKER_TRAIN_RANK_COMMAND_H_
