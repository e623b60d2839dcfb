// The chaos soak's "catalog consistent with disk" invariant for one job: its catalog entries
// (`mtctl -o json checkpoints list JOB`) against the checkpoint directories of its save_dir that
// hold a manifest. Pure; thread-safe.
//   - every step with a COMPLETE or VERIFIED entry is on disk;
//   - every step on disk has a COMPLETE or VERIFIED entry (saves made while the coordinator was
//     away reach it when it is back: the caller allows for that delay);
//   - no entry is CORRUPT (nothing here damages files);
//   - a DELETED step is not on disk unless a later entry of the same step is live (a save made
//     again at that step after a restart).
// WRITING entries (a save in progress, or one that died) are not compared; they are counted.
#ifndef MT_TESTS_CHAOS_CATALOG_CHECK_H_
#define MT_TESTS_CHAOS_CATALOG_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "mt/v1/checkpoint.pb.h"

namespace mt::chaos {

struct CatalogComparison {
  std::vector<std::string> mismatches;  // one sentence each, naming the step
  int writing = 0;                      // WRITING entries
  int live = 0;                         // COMPLETE or VERIFIED entries
};

CatalogComparison CompareCatalogWithDisk(const std::vector<mt::v1::Checkpoint>& catalog,
                                         const std::vector<int64_t>& disk_steps);

}  // namespace mt::chaos

#endif  // MT_TESTS_CHAOS_CATALOG_CHECK_H_
