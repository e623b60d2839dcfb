// The verbs of `mtctl data` (client/data/data_cmd.cc dispatches to them). Each takes the
// arguments after its name, prints results to stdout and errors to stderr, and returns an exit
// code (0 ok, 1 failed, 2 bad usage or input, 3 not found).
#ifndef MT_CLIENT_DATA_DATA_VERBS_H_
#define MT_CLIENT_DATA_DATA_VERBS_H_

#include <string>
#include <vector>

namespace mt::client::data_cli {

int RunPreprocess(const std::vector<std::string>& args);  // preprocess_cmd.cc
int RunInspect(const std::vector<std::string>& args);     // inspect_cmd.cc
int RunMerge(const std::vector<std::string>& args);       // merge_cmd.cc

}  // namespace mt::client::data_cli

#endif  // MT_CLIENT_DATA_DATA_VERBS_H_
