// The mtctl verbs. Each takes its positional arguments (after the verb) and the global
// options, prints results to stdout and errors to stderr, and returns an exit code.
#ifndef MT_CLIENT_VERBS_H_
#define MT_CLIENT_VERBS_H_

#include <string>
#include <vector>

#include "client/common.h"
#include "mt/v1/job.pb.h"

namespace mt::client {

struct Verb {
  const char* name;
  const char* summary;
  const char* usage;  // shown by `mtctl VERB --help`
  int (*run)(const std::vector<std::string>& args, const GlobalOptions& options);
  // True for verbs that parse their own flags (e.g. `data preprocess`, whose flags follow
  // Megatron's preprocess_data.py): every argument after the verb reaches them untouched and
  // the global flags take their defaults.
  bool raw_args = false;
};

// Every verb, in the order `mtctl --help` lists them.
const std::vector<Verb>& AllVerbs();

// The whole of mtctl: finds the verb, parses flags, runs it, returns the exit code.
int Main(int argc, char** argv);

int RunSubmit(const std::vector<std::string>& args, const GlobalOptions& options);
int RunList(const std::vector<std::string>& args, const GlobalOptions& options);
int RunDescribe(const std::vector<std::string>& args, const GlobalOptions& options);
int RunWatch(const std::vector<std::string>& args, const GlobalOptions& options);
int RunLogs(const std::vector<std::string>& args, const GlobalOptions& options);
int RunCancel(const std::vector<std::string>& args, const GlobalOptions& options);
int RunDelete(const std::vector<std::string>& args, const GlobalOptions& options);
// mtctl data preprocess | inspect | merge (client/data/data_cmd.cc).
int RunData(const std::vector<std::string>& args, const GlobalOptions& options);
int RunWorkers(const std::vector<std::string>& args, const GlobalOptions& options);
int RunInfo(const std::vector<std::string>& args, const GlobalOptions& options);
// mtctl top (client/top_cmd.cc).
int RunTop(const std::vector<std::string>& args, const GlobalOptions& options);
int RunPlan(const std::vector<std::string>& args, const GlobalOptions& options);
// mtctl checkpoints ... (client/checkpoints_cmd.cc).
int RunCheckpoints(const std::vector<std::string>& args, const GlobalOptions& options);
int RunValidate(const std::vector<std::string>& args, const GlobalOptions& options);
// mtctl eval | generate: jobs from a checkpoint (client/inference_cmd.cc).
int RunEval(const std::vector<std::string>& args, const GlobalOptions& options);
int RunGenerate(const std::vector<std::string>& args, const GlobalOptions& options);
// `mtctl describe`'s lines for an eval or generation job: its checkpoint, task and result.
void PrintInferenceTask(const mt::v1::Job& job);

}  // namespace mt::client

#endif  // MT_CLIENT_VERBS_H_
