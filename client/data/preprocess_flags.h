// `mtctl data preprocess` flags (those of Megatron-LM's tools/preprocess_data.py) turned into
// data::PreprocessOptions. Flags with no meaning here are accepted with a notice; flags that
// would change the output in a way we cannot reproduce are rejected, naming the flag and what
// to do instead. Thread-safe functions.
#ifndef MT_CLIENT_DATA_PREPROCESS_FLAGS_H_
#define MT_CLIENT_DATA_PREPROCESS_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/data/flags.h"
#include "client/output.h"
#include "common/data/preprocess.h"

namespace mt::client::data_cli {

extern const char kPreprocessUsage[];

// Every flag preprocess accepts.
const std::vector<FlagSpec>& PreprocessFlags();

struct PreprocessCommand {
  data::PreprocessOptions options;  // without cancel and on_progress: the runner sets them
  std::string vocab_file;
  std::string merge_file;
  OutputFormat format = OutputFormat::kTable;
  bool quiet = false;
  std::vector<std::string> notices;  // for stderr, one "mtctl: notice:" line each
};

// The command of parsed flags; InvalidArgument naming the flag when one is wrong or missing.
// `cpus`: the default --workers.
absl::StatusOr<PreprocessCommand> ParsePreprocess(const ParsedFlags& flags, int cpus);

}  // namespace mt::client::data_cli

#endif  // MT_CLIENT_DATA_PREPROCESS_FLAGS_H_
