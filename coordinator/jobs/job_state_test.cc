#include "coordinator/jobs/job_state.h"

#include <set>

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;

// Walks every (from, to) pair of real states: exactly the table's edges are allowed, nothing
// leaves a terminal state, and every non-terminal state can reach a terminal one.
TEST(JobState, EveryEdgeOfTheTable) {
  const std::set<std::pair<int, int>> expected = {{1, 2}, {1, 7}, {1, 6}, {2, 3}, {2, 4},
                                                  {2, 6}, {2, 7}, {2, 5}, {3, 5}, {3, 4},
                                                  {3, 6}, {3, 7}, {4, 1}, {4, 6}, {4, 7}};
  int allowed = 0;
  for (int from = 1; from <= 7; ++from) {
    for (int to = 1; to <= 7; ++to) {
      auto f = static_cast<mt::v1::JobState>(from);
      auto t = static_cast<mt::v1::JobState>(to);
      absl::Status s = CheckTransition(f, t);
      if (expected.count({from, to})) {
        EXPECT_THAT(s, IsOk()) << from << "->" << to;
        ++allowed;
      } else {
        EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition)) << from << "->" << to;
      }
      if (IsTerminal(f)) {
        EXPECT_FALSE(s.ok());
      }
    }
  }
  EXPECT_EQ(allowed, 15);
  EXPECT_EQ(AllowedTransitions().size(), 15u);
  EXPECT_EQ(CheckTransition(mt::v1::JOB_STATE_SUCCEEDED, mt::v1::JOB_STATE_RUNNING).message(),
            "a SUCCEEDED job cannot become RUNNING");
}

TEST(JobState, TerminalStates) {
  EXPECT_TRUE(IsTerminal(mt::v1::JOB_STATE_SUCCEEDED));
  EXPECT_TRUE(IsTerminal(mt::v1::JOB_STATE_FAILED));
  EXPECT_TRUE(IsTerminal(mt::v1::JOB_STATE_CANCELLED));
  EXPECT_FALSE(IsTerminal(mt::v1::JOB_STATE_PENDING));
  EXPECT_FALSE(IsTerminal(mt::v1::JOB_STATE_RESTARTING));
  EXPECT_EQ(ShortName(mt::v1::JOB_STATE_RESTARTING), "RESTARTING");
}

}  // namespace
}  // namespace mt::coordinator
