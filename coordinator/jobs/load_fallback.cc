#include "coordinator/jobs/load_fallback.h"

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"

namespace mt::coordinator {

std::optional<std::string> DescribeLoadFallback(const mt::v1::CheckpointReport& loaded) {
  std::string dir = loaded.directory();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  if (slash == std::string::npos || slash == 0) return std::nullopt;
  const std::string save_dir = dir.substr(0, slash);
  absl::StatusOr<int64_t> latest = checkpoint::ReadLatest(save_dir);
  if (!latest.ok() || *latest <= loaded.step()) return std::nullopt;
  return absl::StrCat("resumed from ", dir, " (step ", loaded.step(), "), not from the latest, ",
                      checkpoint::IterationDirName(*latest), " of ", save_dir,
                      ": the newer checkpoint failed verification and was skipped (the rank's "
                      "log says why; mtctl checkpoints verify checks it)");
}

}  // namespace mt::coordinator
