// Small mt checkpoints on disk, without GoogleTest (the catalog's tests through
// test_checkpoint.h, and the coordinator's fuzz target): one shard and a manifest, the way
// rank 0 of a one-rank job leaves them. Thread-compatible.
#ifndef MT_TESTS_TESTUTIL_TEST_CHECKPOINT_FILES_H_
#define MT_TESTS_TESTUTIL_TEST_CHECKPOINT_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mt::testutil {

// The shard's bytes of the checkpoint at `step`: 5000 + step copies of the byte `step`.
std::string TestCheckpointBytes(int64_t step);

// Writes `save_dir`/iter_<step>/ with one shard, then (with `commit`) manifest.json for
// `job_id` and the `latest` pointer; returns the iteration directory. With `real_shard`, the
// shard is a safetensors file of one U8 tensor that the manifest lists (what an import checks);
// otherwise the raw TestCheckpointBytes(step).
absl::StatusOr<std::string> MakeTestCheckpoint(const std::string& save_dir,
                                               const std::string& job_id, int64_t step,
                                               double validation_loss, bool commit = true,
                                               bool real_shard = false);

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_TEST_CHECKPOINT_FILES_H_
