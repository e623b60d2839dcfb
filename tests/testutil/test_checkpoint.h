// Small mt checkpoints on disk for the catalog's tests and the checkpoint RPCs' tests: one shard
// and a manifest, the way rank 0 of a one-rank job leaves them. Thread-compatible.
#ifndef MT_TESTS_TESTUTIL_TEST_CHECKPOINT_H_
#define MT_TESTS_TESTUTIL_TEST_CHECKPOINT_H_

#include <cstdint>
#include <string>

namespace mt::testutil {

// The shard's bytes of the checkpoint at `step`: 5000 + step copies of the byte `step`.
std::string TestCheckpointBytes(int64_t step);

// Writes `save_dir`/iter_<step>/ with one shard, then (with `commit`) manifest.json for
// `job_id` and the `latest` pointer; returns the iteration directory. With `real_shard`, the
// shard is a safetensors file of one U8 tensor that the manifest lists (what an import checks);
// otherwise the raw TestCheckpointBytes(step). Failures are reported as gtest failures.
std::string WriteTestCheckpoint(const std::string& save_dir, const std::string& job_id,
                                int64_t step, double validation_loss, bool commit = true,
                                bool real_shard = false);

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_TEST_CHECKPOINT_H_
