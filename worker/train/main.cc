// mt-train: the trainer process (LibTorch). `mt-worker train ...` runs it for users, and the
// worker daemon runs one per rank with --assignment. Both are thin front ends over the rank
// session (session.h). Runs on the main thread only.
//   mt-train --spec job.yaml [--device cuda] [--synthetic-data] ...   one device, by hand
//   mt-train --assignment FILE                                        one rank of a job
//   mt-train generate CHECKPOINT --prompt TEXT ...                     text from a checkpoint
//   mt-train eval CHECKPOINT --data-path PREFIX ...                    its loss and perplexity
//   mt-train --help | --version
#include <cstdio>
#include <string>
#include <vector>

#include "common/cli/help_version.h"
#include "worker/train/eval_command.h"
#include "worker/train/generate_command.h"
#include "worker/train/rank_command.h"
#include "worker/train/train_command.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && (args[0] == "--version" || args[0] == "-version")) {
    std::puts(mt::cli::VersionLine("mt-train").c_str());  // every binary's format
    return 0;
  }
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::fputs(mt::train::TrainCommandUsage(), stdout);
    std::fputs("\n", stdout);
    std::fputs(mt::train::GenerateCommandUsage(), stdout);
    std::fputs("\n", stdout);
    std::fputs(mt::train::EvalCommandUsage(), stdout);
    std::fputs("\nmt-train --assignment FILE   one rank of a job (the worker daemon runs this)\n",
               stdout);
    return 0;
  }
  if (!args.empty() && args[0] == "generate") {
    return mt::train::RunGenerateCommand({args.begin() + 1, args.end()});
  }
  if (!args.empty() && args[0] == "eval") {
    return mt::train::RunEvalCommand({args.begin() + 1, args.end()});
  }
  for (const auto& a : args) {
    if (a == "--assignment" || a.rfind("--assignment=", 0) == 0) {
      return mt::train::RunRankCommand(args);
    }
  }
  return mt::train::RunTrainCommand(args);
}
