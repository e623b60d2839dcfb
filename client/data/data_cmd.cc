// mtctl data preprocess | inspect | merge: Megatron-LM's data tools (tools/preprocess_data.py,
// tools/merge_datasets.py) plus an inspector, on the indexed dataset format of
// common/data/FORMAT.md. Each subcommand (a file of its own) parses its own flags, Megatron
// style (flags.h), so existing preprocessing scripts keep working.
#include <cstdio>
#include <iostream>

#include "client/common.h"
#include "client/data/data_verbs.h"
#include "client/data/flags.h"
#include "client/verbs.h"

namespace mt::client {
namespace {

using data_cli::IsFlag;

const char kDataUsage[] =
    "usage: mtctl data SUBCOMMAND [FLAGS]\n\n"
    "  preprocess   JSON lines or text -> GPT-2 BPE tokens -> Megatron .bin/.idx\n"
    "               (flags of Megatron-LM's tools/preprocess_data.py)\n"
    "  inspect      counts, lengths, token histogram and sample documents of a dataset\n"
    "  merge        concatenate datasets (Megatron-LM's tools/merge_datasets.py)\n\n"
    "`mtctl data SUBCOMMAND --help` explains each.\n";

}  // namespace

int RunData(const std::vector<std::string>& args, const GlobalOptions& /*options*/) {
  // Global flags given before the subcommand (`mtctl -o json data inspect X`) go to it.
  std::vector<std::string> leading;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h" || a == "-help") break;
    if (!IsFlag(a)) break;
    if (bool takes_value = false; IsConnectionFlag(a, &takes_value)) {
      if (takes_value) ++i;  // connection flags mean nothing for local data work
      continue;
    }
    // The rest (-o FORMAT, or a mistake) is for the subcommand to accept or reject.
    leading.push_back(a);
    if ((a == "-o" || a == "--output") && i + 1 < args.size()) leading.push_back(args[++i]);
  }
  if (i >= args.size() || args[i] == "--help" || args[i] == "-h" || args[i] == "-help") {
    std::cout << kDataUsage;
    return i >= args.size() ? kExitUsage : kExitOk;
  }
  const std::string& sub = args[i];
  std::vector<std::string> rest(args.begin() + static_cast<ptrdiff_t>(i) + 1, args.end());
  rest.insert(rest.end(), leading.begin(), leading.end());
  if (sub == "preprocess") return data_cli::RunPreprocess(rest);
  if (sub == "inspect") return data_cli::RunInspect(rest);
  if (sub == "merge") return data_cli::RunMerge(rest);
  std::fprintf(stderr, "mtctl: unknown data subcommand '%s'\n\n%s", sub.c_str(), kDataUsage);
  return kExitUsage;
}

}  // namespace mt::client
