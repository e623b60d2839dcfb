// mtctl data merge: concatenates indexed datasets (Megatron-LM's tools/merge_datasets.py).
#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/common.h"
#include "client/data/data_verbs.h"
#include "client/data/flags.h"
#include "client/format.h"
#include "client/output.h"
#include "common/base/paths.h"
#include "common/base/status_macros.h"
#include "common/data/indexed_dataset.h"

namespace mt::client::data_cli {
namespace {

const char kMergeUsage[] =
    "usage: mtctl data merge --input DIR_OR_PREFIX [...] --output-prefix PREFIX\n\n"
    "Concatenates indexed datasets of one dtype into PREFIX.bin/.idx, documents in order\n"
    "(Megatron-LM's tools/merge_datasets.py). --input takes a directory (every PREFIX.bin/.idx\n"
    "pair in it, in sorted order, as Megatron does) or explicit prefixes, in the order given\n"
    "(a trailing .bin or .idx is ignored); several may be given.\n\n"
    "  -o table|json|yaml\n";

// Megatron's merge_datasets.py: every PREFIX with both .bin and .idx in `dir`, sorted; a file
// whose partner is missing is an error.
absl::StatusOr<std::vector<std::string>> PrefixesInDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::NotFoundError(absl::StrCat("--input ", dir, ": ", std::strerror(errno)));
  }
  std::set<std::string> bins, idxs;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    struct stat st;
    const std::string path = JoinPath(dir, n);
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (absl::EndsWith(n, ".bin")) bins.insert(path.substr(0, path.size() - 4));
    if (absl::EndsWith(n, ".idx")) idxs.insert(path.substr(0, path.size() - 4));
  }
  ::closedir(d);
  for (const std::string& p : bins) {
    if (idxs.count(p) == 0) return absl::InvalidArgumentError(absl::StrCat(p, ".bin has no .idx"));
  }
  for (const std::string& p : idxs) {
    if (bins.count(p) == 0) return absl::InvalidArgumentError(absl::StrCat(p, ".idx has no .bin"));
  }
  if (bins.empty()) {
    return absl::NotFoundError(absl::StrCat("--input ", dir, ": no .bin/.idx pairs in it"));
  }
  return std::vector<std::string>(bins.begin(), bins.end());
}

// The dataset prefixes that --input (and positional arguments) name, in order.
absl::StatusOr<std::vector<std::string>> ResolveInputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> prefixes;
  for (const std::string& in : inputs) {
    std::string dir = in;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (IsDirectory(dir)) {
      MT_ASSIGN_OR_RETURN(std::vector<std::string> found, PrefixesInDirectory(dir));
      prefixes.insert(prefixes.end(), found.begin(), found.end());
    } else {
      const std::string p = StripDatasetSuffix(in);
      if (!PathExists(data::IndexPath(p))) {
        return absl::NotFoundError(absl::StrCat(
            "--input ", in, ": neither a directory nor a dataset (no ", data::IndexPath(p), ")"));
      }
      prefixes.push_back(p);
    }
  }
  return prefixes;
}

void PrintMerged(const std::vector<std::string>& prefixes, const std::string& output,
                 const data::IndexedDataset& merged, OutputFormat format) {
  if (format != OutputFormat::kTable) {
    JsonValue in = JsonValue::Array();
    for (const auto& p : prefixes) in.Push(JsonValue::Str(p));
    JsonValue::Object()
        .Set("inputs", std::move(in))
        .Set("output", JsonValue::Str(output))
        .Set("dtype", JsonValue::Str(data::DTypeName(merged.dtype())))
        .Set("documents", JsonValue::Int(merged.num_documents()))
        .Set("sequences", JsonValue::Int(merged.num_sequences()))
        .Set("tokens", JsonValue::Int(merged.num_tokens()))
        .Print(format);
    return;
  }
  std::cout << absl::StrFormat("%-10s %s\n", "inputs",
                               absl::StrCat(prefixes.size(), ": ", absl::StrJoin(prefixes, ", ")));
  std::cout << absl::StrFormat("%-10s %s.{bin,idx}  (%s)\n", "output", output,
                               data::DTypeName(merged.dtype()));
  std::cout << absl::StrFormat("%-10s %s\n", "documents", Thousands(merged.num_documents()));
  std::cout << absl::StrFormat("%-10s %s\n", "tokens", Thousands(merged.num_tokens()));
}

}  // namespace

int RunMerge(const std::vector<std::string>& args) {
  static const std::vector<FlagSpec> specs = {
      {"help", FlagKind::kBool},
      {"input", FlagKind::kList},
      {"output-prefix", FlagKind::kValue},
      {"multimodal", FlagKind::kBool},
      {"o", FlagKind::kValue},
  };
  auto f = ParseFlags(args, specs, "merge");
  if (!f.ok()) return UsageError(f.status());
  if (f->Has("help")) {
    std::cout << kMergeUsage;
    return kExitOk;
  }
  auto format = FormatFlag(*f);
  if (!format.ok()) return UsageError(format.status());
  if (f->Has("multimodal")) {
    return UsageError(absl::InvalidArgumentError(
        "--multimodal is not supported (only text datasets, without per-sequence modes)"));
  }
  std::vector<std::string> inputs = f->List("input");
  // `merge --input a b --output-prefix c` and `merge --output-prefix c a b` both work.
  for (const auto& p : f->positional) inputs.push_back(p);
  const std::string output = StripDatasetSuffix(f->Get("output-prefix"));
  if (inputs.empty() || output.empty()) {
    return UsageError(absl::InvalidArgumentError(
        "merge needs --input (a directory or prefixes) and --output-prefix"));
  }
  auto prefixes = ResolveInputs(inputs);
  if (!prefixes.ok()) return Fail(prefixes.status());
  for (const std::string& p : *prefixes) {
    if (p == output) {
      return UsageError(absl::InvalidArgumentError(
          absl::StrCat("--output-prefix ", output, " is also an input")));
    }
  }
  absl::Status s = data::MergeIndexedDatasets(*prefixes, output);
  if (!s.ok()) return Fail(s);
  auto merged = data::IndexedDataset::Create(output);
  if (!merged.ok()) return Fail(merged.status());
  PrintMerged(*prefixes, output, **merged, *format);
  return kExitOk;
}

}  // namespace mt::client::data_cli
