// MakeTestCheckpoint (test_checkpoint_files.h) for GoogleTest suites: a failure to write is a
// test failure. Thread-compatible.
#ifndef MT_TESTS_TESTUTIL_TEST_CHECKPOINT_H_
#define MT_TESTS_TESTUTIL_TEST_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "tests/testutil/test_checkpoint_files.h"

namespace mt::testutil {

// MakeTestCheckpoint's directory; a failure is reported with ADD_FAILURE (the directory path is
// returned all the same, so that the test's next step fails on its own terms).
std::string WriteTestCheckpoint(const std::string& save_dir, const std::string& job_id,
                                int64_t step, double validation_loss, bool commit = true,
                                bool real_shard = false);

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_TEST_CHECKPOINT_H_
