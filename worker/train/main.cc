// mt-train: the trainer process. `mt-worker train ...` runs it for users, and the worker
// daemon runs one per rank with --assignment.
//   mt-train --spec job.yaml [--device cuda] [--synthetic-data] ...   one device, by hand
//   mt-train --assignment FILE                                        one rank of a job
#include <string>
#include <vector>

#include "worker/engine/train_command.h"
#include "worker/train/rank_command.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (a == "--assignment" || a.rfind("--assignment=", 0) == 0) {
      return mt::train::RunRankCommand(args);
    }
  }
  return mt::engine::RunTrainCommand(args);
}
