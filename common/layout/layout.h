// Megatron-LM's rank layout, node placement and pipeline layer split (DESIGN.md §4).
// Pure math: no I/O, no global state, no LibTorch.
//
// Rank layout, TP fastest, order tp-cp-dp-pp (Megatron's default "tp-cp-ep-dp-pp" with ep = 1):
//
//   rank = tp + TP*(cp + CP*(dp + DP*pp))        world = TP*CP*PP*DP
//
// where lower-case names are a rank's coordinates (0 <= tp < TP, ...) and upper-case names the
// group sizes. A group family fixes some coordinates and varies the others; e.g. a data-parallel
// group holds the DP ranks that share (tp, cp, pp).
//
// Megatron's worked example (initialize_model_parallel's docstring): 16 GPUs, TP=2, PP=4, so
// DP=2 (CP=1):
//
//   8 tensor model-parallel groups:
//     [0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]
//   8 data-parallel groups:
//     [0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]
//   4 pipeline model-parallel groups:
//     [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]
//
// Group order is Megatron's (generate_masked_orthogonal_rank_groups): every group is ascending,
// and the groups are ordered by their fixed coordinates with tp fastest, which is the same as
// ordering them by their first rank. A rank's index inside its (ascending) group is its rank in
// the process group that torch.distributed.new_group(ranks) creates.
#ifndef MT_COMMON_LAYOUT_LAYOUT_H_
#define MT_COMMON_LAYOUT_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt::layout {

// Limits that keep every product and index comfortably inside an int.
inline constexpr int kMaxParallelSize = 65536;  // each of tp, cp, pp, dp
inline constexpr int kMaxWorldSize = 1 << 20;

// The four parallel sizes. A plain value; check it with ValidateDims or RankLayout::Create.
struct ParallelDims {
  int tp = 1;  // tensor_model_parallel_size
  int cp = 1;  // context_parallel_size
  int pp = 1;  // pipeline_model_parallel_size
  int dp = 1;  // data_parallel_size

  // tp*cp*pp*dp, saturating at INT64_MAX so that unvalidated input cannot overflow.
  int64_t world() const;
  // "tp=2 cp=1 pp=4 dp=2".
  std::string ToString() const;

  friend bool operator==(const ParallelDims& a, const ParallelDims& b) {
    return a.tp == b.tp && a.cp == b.cp && a.pp == b.pp && a.dp == b.dp;
  }
  friend bool operator!=(const ParallelDims& a, const ParallelDims& b) { return !(a == b); }
};

// INVALID_ARGUMENT unless every size is in [1, kMaxParallelSize], world is in
// [1, kMaxWorldSize] and tp*cp*pp*dp == world. Messages name the field or show the product:
//   "tensor_model_parallel_size must be >= 1, got 0"
//   "tp(2)*pp(4)*dp(3)=24 != world(16)"          (cp(..) appears only when cp > 1)
absl::Status ValidateDims(const ParallelDims& dims, int world);

// Builds dims from user-facing sizes. dp_or_zero_for_auto == 0 means dp = world/(tp*cp*pp);
// when world is not divisible the error names the fix:
//   "world(10) is not divisible by tp(4)*pp(1)=4; choose a world size that is a multiple of 4"
// The result always passes ValidateDims(result, world). Errors are INVALID_ARGUMENT.
absl::StatusOr<ParallelDims> ResolveDims(int tp, int cp, int pp, int dp_or_zero_for_auto,
                                         int world);

// A rank's coordinates; each in [0, size) of the matching ParallelDims field.
struct RankCoord {
  int tp = 0;
  int cp = 0;
  int dp = 0;
  int pp = 0;

  std::string ToString() const;  // "(tp=1 cp=0 dp=1 pp=3)"
  friend bool operator==(const RankCoord& a, const RankCoord& b) {
    return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp && a.pp == b.pp;
  }
  friend bool operator!=(const RankCoord& a, const RankCoord& b) { return !(a == b); }
};

// The process-group families Megatron builds in initialize_model_parallel. The comment gives
// Megatron's token (RankGenerator.get_ranks) and which coordinates vary inside a group.
enum class GroupKind {
  kTensor,             // "tp": vary tp. Intra-layer all-reduce; must stay inside a node.
  kContext,            // "cp": vary cp. Ring attention KV exchange.
  kData,               // "dp": vary dp. Gradient all-reduce when cp == 1.
  kDataWithContext,    // "dp-cp": vary cp and dp. Gradient all-reduce / distributed optimizer
                       // shards (CP ranks hold identical weights, so they join the reduction).
  kPipeline,           // "pp": vary pp. Stage-to-stage send/recv.
  kModel,              // "tp-pp" (Megatron's "mp"): vary tp and pp; one full model replica.
  kTensorAndData,      // "tp-dp": vary tp and dp (fp8 amax reduction, MoE).
  kTensorAndContext,   // "tp-cp": vary tp and cp.
  kEmbedding,          // per pipeline group: [first, last] stage ranks ([rank] when pp == 1);
                       // ties the input embedding to the output layer's weights.
  kPositionEmbedding,  // per pipeline group: [first] stage rank.
};

inline constexpr GroupKind kAllGroupKinds[] = {
    GroupKind::kTensor,        GroupKind::kContext,
    GroupKind::kData,          GroupKind::kDataWithContext,
    GroupKind::kPipeline,      GroupKind::kModel,
    GroupKind::kTensorAndData, GroupKind::kTensorAndContext,
    GroupKind::kEmbedding,     GroupKind::kPositionEmbedding,
};

// Megatron's short name: "tp", "cp", "dp", "dp-cp", "pp", "mp", "tp-dp", "tp-cp", "embd",
// "pos_embd" (the keys of its NCCL communicator config).
absl::string_view GroupKindName(GroupKind kind);

// An immutable, validated layout. Thread-safe (all members are const); cheap to copy.
// Methods taking a rank or a coordinate require it to be in range (MT_CHECK, i.e. a crash on a
// programming error); validate untrusted input against world() first.
class RankLayout {
 public:
  // INVALID_ARGUMENT for sizes outside [1, kMaxParallelSize] or a world above kMaxWorldSize.
  static absl::StatusOr<RankLayout> Create(const ParallelDims& dims);

  const ParallelDims& dims() const { return dims_; }
  int world() const { return world_; }

  int Rank(const RankCoord& coord) const;
  RankCoord Coord(int rank) const;

  int TensorRank(int rank) const { return Coord(rank).tp; }
  int ContextRank(int rank) const { return Coord(rank).cp; }
  int DataRank(int rank) const { return Coord(rank).dp; }
  int PipelineRank(int rank) const { return Coord(rank).pp; }  // the pipeline stage
  bool IsFirstStage(int rank) const { return PipelineRank(rank) == 0; }
  bool IsLastStage(int rank) const { return PipelineRank(rank) == dims_.pp - 1; }

  // Every group of a family, in Megatron's order (see the top of this file). Each family
  // partitions the ranks, except kEmbedding and kPositionEmbedding, which cover only the
  // first/last stages (all ranks when pp == 1).
  std::vector<std::vector<int>> Groups(GroupKind kind) const;
  // The group of `kind` holding `rank`, ascending; empty when none does (only possible for
  // kEmbedding and kPositionEmbedding).
  std::vector<int> GroupOf(GroupKind kind, int rank) const;
  // The index of `rank` inside GroupOf(kind, rank), or -1 when it is in no group of `kind`.
  int GroupRank(GroupKind kind, int rank) const;

  std::vector<std::vector<int>> TensorGroups() const { return Groups(GroupKind::kTensor); }
  std::vector<std::vector<int>> ContextGroups() const { return Groups(GroupKind::kContext); }
  std::vector<std::vector<int>> DataGroups() const { return Groups(GroupKind::kData); }
  std::vector<std::vector<int>> DataWithContextGroups() const {
    return Groups(GroupKind::kDataWithContext);
  }
  std::vector<std::vector<int>> PipelineGroups() const { return Groups(GroupKind::kPipeline); }
  std::vector<std::vector<int>> ModelParallelGroups() const { return Groups(GroupKind::kModel); }
  std::vector<std::vector<int>> TensorAndDataGroups() const {
    return Groups(GroupKind::kTensorAndData);
  }
  std::vector<std::vector<int>> TensorAndContextGroups() const {
    return Groups(GroupKind::kTensorAndContext);
  }
  std::vector<std::vector<int>> EmbeddingGroups() const { return Groups(GroupKind::kEmbedding); }
  std::vector<std::vector<int>> PositionEmbeddingGroups() const {
    return Groups(GroupKind::kPositionEmbedding);
  }

  std::vector<int> TensorGroupOf(int rank) const { return GroupOf(GroupKind::kTensor, rank); }
  std::vector<int> ContextGroupOf(int rank) const { return GroupOf(GroupKind::kContext, rank); }
  std::vector<int> DataGroupOf(int rank) const { return GroupOf(GroupKind::kData, rank); }
  std::vector<int> DataWithContextGroupOf(int rank) const {
    return GroupOf(GroupKind::kDataWithContext, rank);
  }
  std::vector<int> PipelineGroupOf(int rank) const { return GroupOf(GroupKind::kPipeline, rank); }
  std::vector<int> ModelParallelGroupOf(int rank) const { return GroupOf(GroupKind::kModel, rank); }
  std::vector<int> TensorAndDataGroupOf(int rank) const {
    return GroupOf(GroupKind::kTensorAndData, rank);
  }
  std::vector<int> TensorAndContextGroupOf(int rank) const {
    return GroupOf(GroupKind::kTensorAndContext, rank);
  }
  std::vector<int> EmbeddingGroupOf(int rank) const { return GroupOf(GroupKind::kEmbedding, rank); }
  std::vector<int> PositionEmbeddingGroupOf(int rank) const {
    return GroupOf(GroupKind::kPositionEmbedding, rank);
  }

 private:
  explicit RankLayout(const ParallelDims& dims);

  ParallelDims dims_;
  int world_;
};

// Places the ranks of `layout` on free GPU slots. slot_nodes[i] names the node of free slot i
// (the scheduler's free list; a node's slots need not be adjacent in it). Returns, for each
// rank, the index of its slot; distinct slots; deterministic for a given input.
//
// Guarantees: every tensor-parallel group lies on one node (NVLink), on consecutive entries of
// that node's slot list (its slots in increasing index order), in rank order.
//
// Policy: the TP groups, taken in rank order (group g = ranks [g*TP, (g+1)*TP)), are packed
// onto as few nodes as possible; among node sets of that size the one whose nodes appear
// earliest (nodes ordered by their first slot) wins, and the chosen nodes are filled in that
// order, each up to the number of whole TP groups it can hold. Consecutive ranks thus share a
// node: a TP group, then its CP and DP peers in the same stage, then the next stage — Megatron's
// "adjacent ranks on the same box" convention, which keeps DP/CP collectives inside a node when
// they fit there and puts pipeline send/recv across nodes at stage boundaries.
//
// Errors: INVALID_ARGUMENT for an empty node name; FAILED_PRECONDITION when it cannot place:
//   "world 16 needs 16 free GPU slots, only 12 given"
//   "tensor parallel group of 4 ranks does not fit on any node: largest free node 'n2' has 3
//    slots"
//   "tensor parallel groups of 2 ranks cannot span nodes: 4 groups needed, the free slots hold
//    3 (a: 3 slots, b: 3 slots, c: 3 slots)"
// `slot_kind` names the slots in messages ("GPU" or "CPU").
absl::StatusOr<std::vector<int>> PlaceRanksOnSlots(const RankLayout& layout,
                                                   const std::vector<std::string>& slot_nodes,
                                                   absl::string_view slot_kind = "GPU");

// Splits num_layers transformer layers over pp pipeline stages, optionally interleaved into
// virtual_chunks model chunks per stage (1 = no interleaving; Megatron's
// virtual_pipeline_model_parallel_size).
//
// Returns result[s] = the global layer indices (0-based) that stage s owns, ascending within a
// chunk and chunks in order v = 0, 1, ...; with interleaving, every chunk has
// c = num_layers/(pp*virtual_chunks) layers and chunk v of stage s is
// result[s][v*c .. (v+1)*c) = layers [(v*pp + s)*c, (v*pp + s + 1)*c). E.g. 8 layers, pp=2,
// 2 chunks: stage 0 = [0,1,4,5], stage 1 = [2,3,6,7]. Megatron's docstring example (16 layers,
// pp=4, 2 chunks, 1-based): GPU 0: [1,2] [9,10]; GPU 1: [3,4] [11,12]; ...
//
// explicit_split (layers per stage, empty = even) gives stage s the consecutive layers after
// those of stages < s; it needs pp entries, each >= 1, summing to num_layers, and
// virtual_chunks == 1. An even split needs num_layers divisible by pp*virtual_chunks;
// interleaving needs pp > 1. Errors are INVALID_ARGUMENT and name the fix, e.g.
//   "num_layers(10) is not divisible by pp(4); choose a multiple of 4 or give an explicit
//    split"
absl::StatusOr<std::vector<std::vector<int>>> StageLayers(int num_layers, int pp,
                                                          int virtual_chunks,
                                                          const std::vector<int>& explicit_split);

}  // namespace mt::layout

#endif  // MT_COMMON_LAYOUT_LAYOUT_H_
