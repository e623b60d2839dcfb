// The c10d process groups of one rank, built from the job's layout (common/layout, Megatron's
// tp-cp-dp-pp order): world, tensor (TP), pipeline (PP), data (DP), embedding (the first and
// last pipeline stage of each pipeline, for the tied word embedding) and model-parallel
// (TP x PP, for the global gradient norm). Every group is a c10d Backend (ProcessGroup on
// LibTorch 1.13) over a PrefixStore named after the group, so only its members create it:
// Gloo on CPU, NCCL on GPU; never a home-made collective.
//
// A group of one has no c10d object (group == nullptr): callers skip the collective. A rank
// outside a group (only possible for the embedding group) has member == false.
//
// Tests build the groups of N ranks in one process from one c10d::HashStore, one thread per
// rank (see process_groups_test.cc); the job builds them over the TCPStore of dist.h.
//
// This header includes c10d: include it only from LibTorch translation units.
// Thread-compatible: one training thread uses the groups of its rank.
#ifndef MT_WORKER_PARALLEL_PROCESS_GROUPS_H_
#define MT_WORKER_PARALLEL_PROCESS_GROUPS_H_

#include <torch/version.h>

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mt/v1/job.pb.h"
#include "worker/parallel/comm_stats.h"
#include "worker/parallel/rank_network.h"
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace mt::parallel {

// LibTorch 2.x splits the process group into a ProcessGroup and its Backend; the backends
// carry the collectives we call. 1.13 has only ProcessGroup.
#if TORCH_VERSION_MAJOR >= 2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif

struct GroupHandle {
  std::string name;                 // "tp/0", "dp/3", ... (the PrefixStore prefix)
  c10::intrusive_ptr<Group> group;  // null when size == 1 or not a member
  std::vector<int> ranks;           // global ranks in group order
  int rank = 0;                     // this rank's index in `ranks`; -1 when not a member
  int size = 1;
  // Where collectives over the group are timed (the rank's, shared by all its groups; null:
  // not timed) and under which group label.
  std::shared_ptr<CommStats> comm_stats;
  CommGroup comm_group = CommGroup::kWorld;

  bool member() const { return rank >= 0; }
  // True when a collective over this group has something to do.
  bool active() const { return member() && size > 1; }
};

// Waits for a c10d work item; its exceptions come out as kUnavailable naming `what`.
absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what);

// Starts timing `collective` over `group` on the device of `t` (comm_stats.h): call right
// before issuing the op, Finish() the span once its wait returned. Records nothing when the
// group has no recorder.
inline CommStats::Span StartComm(const GroupHandle& group, Collective collective,
                                 const at::Tensor& t) {
  if (group.comm_stats == nullptr) return CommStats::Span();
  return group.comm_stats->Start(collective, group.comm_group, t.is_cuda() ? t.get_device() : -1);
}

class ProcessGroups {
 public:
  // Creates every group this rank is a member of. `backend` is "gloo" or "nccl". All ranks of
  // the layout must call it concurrently with the same layout and store.
  // `network` says where Gloo binds (rank_network.h; default: Gloo's default device).
  static absl::StatusOr<std::shared_ptr<ProcessGroups>> Create(
      const mt::v1::Layout& layout, int rank, c10::intrusive_ptr<c10d::Store> store,
      const std::string& backend, std::chrono::milliseconds timeout,
      const RankNetwork& network = {});
  // A world of one: every group has size 1 and no c10d object.
  static std::shared_ptr<ProcessGroups> Single(const std::string& backend = "gloo");

  int rank() const { return rank_; }
  int world_size() const { return world_.size; }
  const std::string& backend() const { return backend_; }
  bool is_cuda() const { return backend_ == "nccl"; }
  const mt::v1::Layout& layout() const { return layout_; }

  const GroupHandle& world() const { return world_; }
  const GroupHandle& tp() const { return tp_; }
  const GroupHandle& pp() const { return pp_; }
  const GroupHandle& dp() const { return dp_; }
  const GroupHandle& embedding() const { return embedding_; }
  const GroupHandle& model_parallel() const { return model_parallel_; }
  // The time this rank spent in collectives over any of its groups (comm_stats.h).
  CommStats* comm_stats() const { return comm_stats_.get(); }

  // Coordinates of this rank (= its index in the corresponding group).
  int tp_rank() const { return tp_.rank; }
  int pp_rank() const { return pp_.rank; }
  int dp_rank() const { return dp_.rank; }
  bool is_first_stage() const { return pp_.rank == 0; }
  bool is_last_stage() const { return pp_.rank == pp_.size - 1; }

 private:
  ProcessGroups() = default;

  mt::v1::Layout layout_;
  std::string backend_;
  int rank_ = 0;
  GroupHandle world_, tp_, pp_, dp_, embedding_, model_parallel_;
  std::shared_ptr<CommStats> comm_stats_ = std::make_shared<CommStats>();

  // Gives every group the recorder and its label.
  void AttachCommStats();
};

}  // namespace mt::parallel

#endif  // MT_WORKER_PARALLEL_PROCESS_GROUPS_H_
