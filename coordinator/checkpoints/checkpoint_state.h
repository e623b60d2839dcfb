// The catalog's checkpoint state machine (mt.v1.CheckpointState; each value is commented in
// proto/mt/v1/checkpoint.proto). The allowed transitions are the one table in
// checkpoint_state.cc:
//   (new)     -> WRITING, COMPLETE (registered after the commit), VERIFIED (imported)
//   WRITING   -> COMPLETE (the manifest appeared), DELETED (the save never committed)
//   COMPLETE  -> COMPLETE (re-saved), VERIFIED, CORRUPT, DELETED
//   VERIFIED  -> COMPLETE (re-saved), VERIFIED, CORRUPT, DELETED
//   CORRUPT   -> COMPLETE (re-saved), VERIFIED (repaired), CORRUPT, DELETED
//   DELETED   -> nothing (a later save of the same directory is a new entry)
// Thread-compatible free functions.
#ifndef MT_COORDINATOR_CHECKPOINTS_CHECKPOINT_STATE_H_
#define MT_COORDINATOR_CHECKPOINTS_CHECKPOINT_STATE_H_

#include "absl/status/status.h"
#include "mt/v1/checkpoint.pb.h"

namespace mt::coordinator {

// `from` = UNSPECIFIED for an entry not in the catalog yet.
bool IsAllowedCheckpointTransition(mt::v1::CheckpointState from, mt::v1::CheckpointState to);
// FAILED_PRECONDITION naming both states when the table forbids it.
absl::Status CheckCheckpointTransition(mt::v1::CheckpointState from, mt::v1::CheckpointState to);

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_CHECKPOINTS_CHECKPOINT_STATE_H_
