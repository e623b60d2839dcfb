#include "tests/testutil/test_checkpoint.h"

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "gtest/gtest.h"

namespace mt::testutil {

std::string WriteTestCheckpoint(const std::string& save_dir, const std::string& job_id,
                                int64_t step, double validation_loss, bool commit,
                                bool real_shard) {
  absl::StatusOr<std::string> dir =
      MakeTestCheckpoint(save_dir, job_id, step, validation_loss, commit, real_shard);
  if (dir.ok()) return *dir;
  ADD_FAILURE() << "test checkpoint " << save_dir << " step " << step << ": " << dir.status();
  return absl::StrCat(save_dir, "/", checkpoint::IterationDirName(step));
}

}  // namespace mt::testutil
