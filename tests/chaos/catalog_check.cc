#include "tests/chaos/catalog_check.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace mt::chaos {

CatalogComparison CompareCatalogWithDisk(const std::vector<mt::v1::Checkpoint>& catalog,
                                         const std::vector<int64_t>& disk_steps) {
  CatalogComparison out;
  const std::set<int64_t> disk(disk_steps.begin(), disk_steps.end());
  std::set<int64_t> live, deleted;
  for (const mt::v1::Checkpoint& c : catalog) {
    switch (c.state()) {
      case mt::v1::CHECKPOINT_STATE_COMPLETE:
      case mt::v1::CHECKPOINT_STATE_VERIFIED:
        ++out.live;
        live.insert(c.step());
        break;
      case mt::v1::CHECKPOINT_STATE_WRITING:
        ++out.writing;
        break;
      case mt::v1::CHECKPOINT_STATE_DELETED:
        deleted.insert(c.step());
        break;
      default:
        out.mismatches.push_back(absl::StrCat("step ", c.step(), " (", c.id(), ") is ",
                                              mt::v1::CheckpointState_Name(c.state())));
    }
  }
  for (int64_t step : live) {
    if (disk.count(step) == 0) {
      out.mismatches.push_back(absl::StrCat("step ", step, " is in the catalog but not on disk"));
    }
  }
  for (int64_t step : disk) {
    if (live.count(step) > 0) continue;
    out.mismatches.push_back(
        deleted.count(step) > 0
            ? absl::StrCat("step ", step, " is DELETED but still on disk")
            : absl::StrCat("step ", step, " is on disk but not in the catalog"));
  }
  return out;
}

}  // namespace mt::chaos
