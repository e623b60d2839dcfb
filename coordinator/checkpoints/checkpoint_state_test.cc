#include "coordinator/checkpoints/checkpoint_state.h"

#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using S = mt::v1::CheckpointState;

// Walks every (from, to) pair of the enum against the documented table.
TEST(CheckpointStateTest, EveryEdge) {
  const std::set<std::pair<S, S>> allowed = {
      {mt::v1::CHECKPOINT_STATE_UNSPECIFIED, mt::v1::CHECKPOINT_STATE_WRITING},
      {mt::v1::CHECKPOINT_STATE_UNSPECIFIED, mt::v1::CHECKPOINT_STATE_COMPLETE},
      {mt::v1::CHECKPOINT_STATE_UNSPECIFIED, mt::v1::CHECKPOINT_STATE_VERIFIED},
      {mt::v1::CHECKPOINT_STATE_WRITING, mt::v1::CHECKPOINT_STATE_COMPLETE},
      {mt::v1::CHECKPOINT_STATE_WRITING, mt::v1::CHECKPOINT_STATE_DELETED},
  };
  const std::set<S> written = {mt::v1::CHECKPOINT_STATE_COMPLETE, mt::v1::CHECKPOINT_STATE_VERIFIED,
                               mt::v1::CHECKPOINT_STATE_CORRUPT};
  int checked = 0;
  for (int f = mt::v1::CheckpointState_MIN; f <= mt::v1::CheckpointState_MAX; ++f) {
    for (int t = mt::v1::CheckpointState_MIN; t <= mt::v1::CheckpointState_MAX; ++t) {
      const S from = static_cast<S>(f);
      const S to = static_cast<S>(t);
      const bool want = allowed.count({from, to}) > 0 ||
                        (written.count(from) > 0 &&
                         (written.count(to) > 0 || to == mt::v1::CHECKPOINT_STATE_DELETED));
      EXPECT_EQ(IsAllowedCheckpointTransition(from, to), want)
          << mt::v1::CheckpointState_Name(from) << " -> " << mt::v1::CheckpointState_Name(to);
      EXPECT_EQ(CheckCheckpointTransition(from, to).ok(), want);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 36);
  EXPECT_FALSE(IsAllowedCheckpointTransition(mt::v1::CHECKPOINT_STATE_DELETED,
                                             mt::v1::CHECKPOINT_STATE_COMPLETE));
}

}  // namespace
}  // namespace mt::coordinator
