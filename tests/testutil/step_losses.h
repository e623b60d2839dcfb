// The per-step losses a rank's progress lines show ("step 3/20 | loss 1.034567E+01 | ..."),
// read back from its log (e.g. `mtctl logs`). Pure; thread-safe.
#ifndef MT_TESTS_TESTUTIL_STEP_LOSSES_H_
#define MT_TESTS_TESTUTIL_STEP_LOSSES_H_

#include <map>
#include <string>

namespace mt::testutil {

// "step 3/20 | loss 1.034567E+01 | ..." -> {3: 10.34567}.
std::map<int, double> StepLosses(const std::string& log);

}  // namespace mt::testutil

#endif  // MT_TESTS_TESTUTIL_STEP_LOSSES_H_
