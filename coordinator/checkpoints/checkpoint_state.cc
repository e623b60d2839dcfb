#include "coordinator/checkpoints/checkpoint_state.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace mt::coordinator {
namespace {

using S = mt::v1::CheckpointState;

constexpr std::pair<S, S> kAllowed[] = {
    {mt::v1::CHECKPOINT_STATE_UNSPECIFIED, mt::v1::CHECKPOINT_STATE_WRITING},
    {mt::v1::CHECKPOINT_STATE_UNSPECIFIED, mt::v1::CHECKPOINT_STATE_COMPLETE},
    {mt::v1::CHECKPOINT_STATE_UNSPECIFIED, mt::v1::CHECKPOINT_STATE_VERIFIED},
    {mt::v1::CHECKPOINT_STATE_WRITING, mt::v1::CHECKPOINT_STATE_COMPLETE},
    {mt::v1::CHECKPOINT_STATE_WRITING, mt::v1::CHECKPOINT_STATE_DELETED},
    {mt::v1::CHECKPOINT_STATE_COMPLETE, mt::v1::CHECKPOINT_STATE_COMPLETE},
    {mt::v1::CHECKPOINT_STATE_COMPLETE, mt::v1::CHECKPOINT_STATE_VERIFIED},
    {mt::v1::CHECKPOINT_STATE_COMPLETE, mt::v1::CHECKPOINT_STATE_CORRUPT},
    {mt::v1::CHECKPOINT_STATE_COMPLETE, mt::v1::CHECKPOINT_STATE_DELETED},
    {mt::v1::CHECKPOINT_STATE_VERIFIED, mt::v1::CHECKPOINT_STATE_COMPLETE},
    {mt::v1::CHECKPOINT_STATE_VERIFIED, mt::v1::CHECKPOINT_STATE_VERIFIED},
    {mt::v1::CHECKPOINT_STATE_VERIFIED, mt::v1::CHECKPOINT_STATE_CORRUPT},
    {mt::v1::CHECKPOINT_STATE_VERIFIED, mt::v1::CHECKPOINT_STATE_DELETED},
    {mt::v1::CHECKPOINT_STATE_CORRUPT, mt::v1::CHECKPOINT_STATE_COMPLETE},
    {mt::v1::CHECKPOINT_STATE_CORRUPT, mt::v1::CHECKPOINT_STATE_VERIFIED},
    {mt::v1::CHECKPOINT_STATE_CORRUPT, mt::v1::CHECKPOINT_STATE_CORRUPT},
    {mt::v1::CHECKPOINT_STATE_CORRUPT, mt::v1::CHECKPOINT_STATE_DELETED},
};

}  // namespace

bool IsAllowedCheckpointTransition(S from, S to) {
  for (const auto& [f, t] : kAllowed) {
    if (f == from && t == to) return true;
  }
  return false;
}

absl::Status CheckCheckpointTransition(S from, S to) {
  if (IsAllowedCheckpointTransition(from, to)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("a checkpoint cannot go from ",
                                                    mt::v1::CheckpointState_Name(from), " to ",
                                                    mt::v1::CheckpointState_Name(to)));
}

}  // namespace mt::coordinator
