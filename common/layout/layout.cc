#include "common/layout/layout.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"

namespace mt::layout {
namespace {

// Axis indices in layout order, fastest first: rank = sum(coord[a] * stride[a]).
enum Axis { kTp = 0, kCp = 1, kDp = 2, kPp = 3, kNumAxes = 4 };
using Mask = std::array<bool, kNumAxes>;  // true = the coordinate varies inside a group

absl::Status CheckSize(absl::string_view field, int value, int min, int max) {
  if (value < min) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be >= ", min, ", got ", value));
  }
  if (value > max) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be <= ", max, ", got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckModelSizes(int tp, int cp, int pp) {
  MT_RETURN_IF_ERROR(CheckSize("tensor_model_parallel_size", tp, 1, kMaxParallelSize));
  MT_RETURN_IF_ERROR(CheckSize("context_parallel_size", cp, 1, kMaxParallelSize));
  MT_RETURN_IF_ERROR(CheckSize("pipeline_model_parallel_size", pp, 1, kMaxParallelSize));
  return absl::OkStatus();
}

absl::Status CheckSizes(const ParallelDims& d) {
  MT_RETURN_IF_ERROR(CheckModelSizes(d.tp, d.cp, d.pp));
  return CheckSize("data_parallel_size", d.dp, 1, kMaxParallelSize);
}

// "tp(2)*pp(4)" or "tp(2)*cp(2)*pp(4)": cp appears only when it is on.
std::string ModelProductText(int tp, int cp, int pp) {
  if (cp > 1) return absl::StrCat("tp(", tp, ")*cp(", cp, ")*pp(", pp, ")");
  return absl::StrCat("tp(", tp, ")*pp(", pp, ")");
}

// Exact even for four sizes of kMaxParallelSize (2^64), hence 128 bits.
absl::uint128 ExactWorld(const ParallelDims& d) {
  return absl::uint128(static_cast<uint64_t>(d.tp)) * static_cast<uint64_t>(d.cp) *
         static_cast<uint64_t>(d.pp) * static_cast<uint64_t>(d.dp);
}

// "tp(2)*pp(4)*dp(3)=24".
std::string WorldProductText(const ParallelDims& d) {
  return absl::StrFormat("%s*dp(%d)=%d", ModelProductText(d.tp, d.cp, d.pp), d.dp, ExactWorld(d));
}

Mask MaskOf(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTensor:
      return {true, false, false, false};
    case GroupKind::kContext:
      return {false, true, false, false};
    case GroupKind::kData:
      return {false, false, true, false};
    case GroupKind::kDataWithContext:
      return {false, true, true, false};
    case GroupKind::kModel:
      return {true, false, false, true};
    case GroupKind::kTensorAndData:
      return {true, false, true, false};
    case GroupKind::kTensorAndContext:
      return {true, true, false, false};
    case GroupKind::kPipeline:
    case GroupKind::kEmbedding:
    case GroupKind::kPositionEmbedding:
      return {false, false, false, true};
  }
  return {false, false, false, true};
}

bool IsEmbeddingKind(GroupKind kind) {
  return kind == GroupKind::kEmbedding || kind == GroupKind::kPositionEmbedding;
}

// Megatron's default_embedding_ranks / default_position_embedding_ranks.
std::vector<int> EmbeddingRanks(GroupKind kind, const std::vector<int>& pipeline_group) {
  if (kind == GroupKind::kPositionEmbedding || pipeline_group.size() == 1) {
    return {pipeline_group.front()};
  }
  return {pipeline_group.front(), pipeline_group.back()};
}

}  // namespace

int64_t ParallelDims::world() const {
  const absl::uint128 exact = absl::uint128(static_cast<uint64_t>(std::max(tp, 0))) *
                              static_cast<uint64_t>(std::max(cp, 0)) *
                              static_cast<uint64_t>(std::max(pp, 0)) *
                              static_cast<uint64_t>(std::max(dp, 0));
  const absl::uint128 max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  return static_cast<int64_t>(static_cast<uint64_t>(std::min(exact, max)));
}

std::string ParallelDims::ToString() const {
  return absl::StrCat("tp=", tp, " cp=", cp, " pp=", pp, " dp=", dp);
}

std::string RankCoord::ToString() const {
  return absl::StrCat("(tp=", tp, " cp=", cp, " dp=", dp, " pp=", pp, ")");
}

absl::Status ValidateDims(const ParallelDims& dims, int world) {
  MT_RETURN_IF_ERROR(CheckSizes(dims));
  MT_RETURN_IF_ERROR(CheckSize("world size", world, 1, kMaxWorldSize));
  if (ExactWorld(dims) != absl::uint128(static_cast<uint64_t>(world))) {
    return absl::InvalidArgumentError(
        absl::StrCat(WorldProductText(dims), " != world(", world, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParallelDims> ResolveDims(int tp, int cp, int pp, int dp_or_zero_for_auto,
                                         int world) {
  MT_RETURN_IF_ERROR(CheckModelSizes(tp, cp, pp));
  MT_RETURN_IF_ERROR(
      CheckSize("data_parallel_size (0 = auto)", dp_or_zero_for_auto, 0, kMaxParallelSize));
  MT_RETURN_IF_ERROR(CheckSize("world size", world, 1, kMaxWorldSize));
  ParallelDims dims{tp, cp, pp, dp_or_zero_for_auto};
  if (dims.dp == 0) {
    const int64_t model = int64_t{tp} * cp * pp;  // <= 2^48
    if (world % model != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("world(", world, ") is not divisible by ", ModelProductText(tp, cp, pp), "=",
                       model, "; choose a world size that is a multiple of ", model));
    }
    dims.dp = static_cast<int>(world / model);
  }
  MT_RETURN_IF_ERROR(ValidateDims(dims, world));
  return dims;
}

absl::string_view GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTensor:
      return "tp";
    case GroupKind::kContext:
      return "cp";
    case GroupKind::kData:
      return "dp";
    case GroupKind::kDataWithContext:
      return "dp-cp";
    case GroupKind::kPipeline:
      return "pp";
    case GroupKind::kModel:
      return "mp";
    case GroupKind::kTensorAndData:
      return "tp-dp";
    case GroupKind::kTensorAndContext:
      return "tp-cp";
    case GroupKind::kEmbedding:
      return "embd";
    case GroupKind::kPositionEmbedding:
      return "pos_embd";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------------
// RankLayout

RankLayout::RankLayout(const ParallelDims& dims)
    : dims_(dims), world_(static_cast<int>(dims.world())) {}

absl::StatusOr<RankLayout> RankLayout::Create(const ParallelDims& dims) {
  MT_RETURN_IF_ERROR(CheckSizes(dims));
  if (ExactWorld(dims) > static_cast<uint64_t>(kMaxWorldSize)) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", WorldProductText(dims),
                                                   " exceeds the limit of ", kMaxWorldSize));
  }
  return RankLayout(dims);
}

int RankLayout::Rank(const RankCoord& c) const {
  MT_CHECK(c.tp >= 0 && c.tp < dims_.tp && c.cp >= 0 && c.cp < dims_.cp && c.dp >= 0 &&
           c.dp < dims_.dp && c.pp >= 0 && c.pp < dims_.pp)
      << "coordinate " << c.ToString() << " outside " << dims_.ToString();
  return c.tp + dims_.tp * (c.cp + dims_.cp * (c.dp + dims_.dp * c.pp));
}

RankCoord RankLayout::Coord(int rank) const {
  MT_CHECK(rank >= 0 && rank < world_) << "rank " << rank << " outside world " << world_;
  RankCoord c;
  c.tp = rank % dims_.tp;
  rank /= dims_.tp;
  c.cp = rank % dims_.cp;
  rank /= dims_.cp;
  c.dp = rank % dims_.dp;
  c.pp = rank / dims_.dp;
  return c;
}

namespace {

struct Axes {
  std::array<int, kNumAxes> size;
  std::array<int, kNumAxes> stride;
};

Axes AxesOf(const ParallelDims& d) {
  Axes a;
  a.size = {d.tp, d.cp, d.dp, d.pp};
  int stride = 1;
  for (int i = 0; i < kNumAxes; ++i) {
    a.stride[i] = stride;
    stride *= a.size[i];
  }
  return a;
}

// Megatron's generate_masked_orthogonal_rank_groups for layout order tp-cp-dp-pp: group g
// decomposes g over the fixed axes (fastest first), member j decomposes j over the varying
// axes (fastest first).
std::vector<std::vector<int>> MaskedGroups(const Axes& axes, const Mask& mask, int world) {
  int group_size = 1;
  for (int i = 0; i < kNumAxes; ++i) {
    if (mask[i]) group_size *= axes.size[i];
  }
  const int num_groups = world / group_size;
  std::vector<std::vector<int>> groups(num_groups);
  for (int g = 0; g < num_groups; ++g) {
    int base = 0;
    int rest = g;
    for (int i = 0; i < kNumAxes; ++i) {
      if (mask[i]) continue;
      base += (rest % axes.size[i]) * axes.stride[i];
      rest /= axes.size[i];
    }
    std::vector<int>& group = groups[g];
    group.reserve(group_size);
    for (int j = 0; j < group_size; ++j) {
      int rank = base;
      int rest_j = j;
      for (int i = 0; i < kNumAxes; ++i) {
        if (!mask[i]) continue;
        rank += (rest_j % axes.size[i]) * axes.stride[i];
        rest_j /= axes.size[i];
      }
      group.push_back(rank);
    }
  }
  return groups;
}

std::array<int, kNumAxes> CoordArray(const RankCoord& c) { return {c.tp, c.cp, c.dp, c.pp}; }

}  // namespace

std::vector<std::vector<int>> RankLayout::Groups(GroupKind kind) const {
  std::vector<std::vector<int>> groups = MaskedGroups(AxesOf(dims_), MaskOf(kind), world_);
  if (IsEmbeddingKind(kind)) {
    for (std::vector<int>& group : groups) group = EmbeddingRanks(kind, group);
  }
  return groups;
}

std::vector<int> RankLayout::GroupOf(GroupKind kind, int rank) const {
  const Axes axes = AxesOf(dims_);
  const Mask mask = MaskOf(kind);
  const std::array<int, kNumAxes> coord = CoordArray(Coord(rank));
  int base = 0;
  int group_size = 1;
  for (int i = 0; i < kNumAxes; ++i) {
    if (mask[i]) {
      group_size *= axes.size[i];
    } else {
      base += coord[i] * axes.stride[i];
    }
  }
  std::vector<int> group;
  group.reserve(group_size);
  for (int j = 0; j < group_size; ++j) {
    int member = base;
    int rest = j;
    for (int i = 0; i < kNumAxes; ++i) {
      if (!mask[i]) continue;
      member += (rest % axes.size[i]) * axes.stride[i];
      rest /= axes.size[i];
    }
    group.push_back(member);
  }
  if (!IsEmbeddingKind(kind)) return group;
  std::vector<int> embedding = EmbeddingRanks(kind, group);
  if (std::find(embedding.begin(), embedding.end(), rank) == embedding.end()) return {};
  return embedding;
}

int RankLayout::GroupRank(GroupKind kind, int rank) const {
  const Axes axes = AxesOf(dims_);
  const Mask mask = MaskOf(kind);
  const std::array<int, kNumAxes> coord = CoordArray(Coord(rank));
  if (IsEmbeddingKind(kind)) {
    if (coord[kPp] == 0) return 0;
    if (kind == GroupKind::kEmbedding && coord[kPp] == dims_.pp - 1) return 1;
    return -1;
  }
  int index = 0;
  int stride = 1;
  for (int i = 0; i < kNumAxes; ++i) {
    if (!mask[i]) continue;
    index += coord[i] * stride;
    stride *= axes.size[i];
  }
  return index;
}

// ---------------------------------------------------------------------------------------------
// Placement

namespace {

struct Node {
  std::string name;
  std::vector<int> slots;  // increasing slot indices
  int capacity = 0;        // whole TP groups it can hold
};

std::string DescribeNodes(const std::vector<Node>& nodes) {
  constexpr size_t kMaxListed = 8;
  std::vector<std::string> parts;
  for (size_t i = 0; i < nodes.size() && i < kMaxListed; ++i) {
    parts.push_back(absl::StrCat(nodes[i].name, ": ", nodes[i].slots.size(), " slots"));
  }
  if (nodes.size() > kMaxListed) {
    parts.push_back(absl::StrCat("and ", nodes.size() - kMaxListed, " more nodes"));
  }
  return absl::StrJoin(parts, ", ");
}

// Sum of the `count` largest capacities among nodes[from..].
int64_t BestCapacity(const std::vector<Node>& nodes, size_t from, size_t count) {
  std::vector<int> caps;
  for (size_t i = from; i < nodes.size(); ++i) caps.push_back(nodes[i].capacity);
  count = std::min(count, caps.size());
  std::partial_sort(caps.begin(), caps.begin() + count, caps.end(), std::greater<int>());
  int64_t sum = 0;
  for (size_t i = 0; i < count; ++i) sum += caps[i];
  return sum;
}

// The nodes in order of their first slot, each with its slots in order and its capacity in
// whole TP groups.
absl::StatusOr<std::vector<Node>> NodesOfSlots(const std::vector<std::string>& slot_nodes, int tp) {
  std::vector<Node> nodes;
  std::map<std::string, size_t> node_index;
  for (size_t slot = 0; slot < slot_nodes.size(); ++slot) {
    const std::string& name = slot_nodes[slot];
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " has an empty node name"));
    }
    auto [it, inserted] = node_index.emplace(name, nodes.size());
    if (inserted) nodes.push_back(Node{name, {}, 0});
    nodes[it->second].slots.push_back(static_cast<int>(slot));
  }
  for (Node& node : nodes) node.capacity = static_cast<int>(node.slots.size()) / tp;
  return nodes;
}

// A TP group fits on one node, and the nodes hold `num_groups` of them.
absl::Status CheckGroupsFit(const std::vector<Node>& nodes, int tp, int num_groups) {
  size_t largest = 0;
  int64_t total_capacity = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    total_capacity += nodes[i].capacity;
    if (nodes[i].slots.size() > nodes[largest].slots.size()) largest = i;
  }
  if (nodes[largest].slots.size() < static_cast<size_t>(tp)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor parallel group of ", tp, " ranks does not fit on any node: largest free node '",
        nodes[largest].name, "' has ", nodes[largest].slots.size(), " slots"));
  }
  if (total_capacity < num_groups) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor parallel groups of ", tp, " ranks cannot span nodes: ", num_groups,
        " groups needed, the free slots hold ", total_capacity, " (", DescribeNodes(nodes), ")"));
  }
  return absl::OkStatus();
}

// The fewest nodes that hold `num_groups` (CheckGroupsFit passed), and of those the earliest
// set: node i is taken when the rest can still be completed.
std::vector<size_t> ChooseNodes(const std::vector<Node>& nodes, int num_groups) {
  std::vector<int> caps;
  for (const Node& node : nodes) caps.push_back(node.capacity);
  std::sort(caps.begin(), caps.end(), std::greater<int>());
  size_t min_nodes = 0;
  for (int64_t sum = 0; sum < num_groups; ++min_nodes) sum += caps[min_nodes];
  std::vector<size_t> chosen;
  int64_t chosen_capacity = 0;
  for (size_t i = 0; i < nodes.size() && chosen.size() < min_nodes; ++i) {
    const size_t still_needed = min_nodes - chosen.size() - 1;
    if (chosen_capacity + nodes[i].capacity + BestCapacity(nodes, i + 1, still_needed) >=
        num_groups) {
      chosen.push_back(i);
      chosen_capacity += nodes[i].capacity;
    }
  }
  MT_CHECK(chosen.size() == min_nodes && chosen_capacity >= num_groups);
  return chosen;
}

}  // namespace

absl::StatusOr<std::vector<int>> PlaceRanksOnSlots(const RankLayout& layout,
                                                   const std::vector<std::string>& slot_nodes,
                                                   absl::string_view slot_kind) {
  const int world = layout.world();
  const int tp = layout.dims().tp;
  if (slot_nodes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("too many slots: ", slot_nodes.size()));
  }
  if (slot_nodes.size() < static_cast<size_t>(world)) {
    return absl::FailedPreconditionError(absl::StrCat("world ", world, " needs ", world, " free ",
                                                      slot_kind, " slots, only ", slot_nodes.size(),
                                                      " given"));
  }
  MT_ASSIGN_OR_RETURN(const std::vector<Node> nodes, NodesOfSlots(slot_nodes, tp));
  const int num_groups = world / tp;
  MT_RETURN_IF_ERROR(CheckGroupsFit(nodes, tp, num_groups));
  // Each chosen node's whole TP groups in slot order, until every group has its slots.
  std::vector<int> slot_of_rank(world, -1);
  int group = 0;
  for (size_t n : ChooseNodes(nodes, num_groups)) {
    const Node& node = nodes[n];
    for (int k = 0; k < node.capacity && group < num_groups; ++k, ++group) {
      for (int t = 0; t < tp; ++t) slot_of_rank[group * tp + t] = node.slots[k * tp + t];
    }
  }
  return slot_of_rank;
}

// ---------------------------------------------------------------------------------------------
// Pipeline layer split

absl::StatusOr<std::vector<std::vector<int>>> StageLayers(int num_layers, int pp,
                                                          int virtual_chunks,
                                                          const std::vector<int>& explicit_split) {
  MT_RETURN_IF_ERROR(CheckSize("num_layers", num_layers, 1, kMaxWorldSize));
  MT_RETURN_IF_ERROR(CheckSize("pp", pp, 1, kMaxParallelSize));
  MT_RETURN_IF_ERROR(CheckSize("virtual_chunks", virtual_chunks, 1, kMaxWorldSize));
  if (virtual_chunks > 1 && pp == 1) {
    return absl::InvalidArgumentError(absl::StrCat("interleaving (virtual_chunks=", virtual_chunks,
                                                   ") needs pp > 1; use virtual_chunks=1"));
  }
  std::vector<std::vector<int>> stages(pp);

  if (!explicit_split.empty()) {
    if (virtual_chunks != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an explicit split cannot be combined with interleaving (virtual_chunks=", virtual_chunks,
          "); use virtual_chunks=1 or an even split"));
    }
    if (explicit_split.size() != static_cast<size_t>(pp)) {
      return absl::InvalidArgumentError(absl::StrCat("explicit split has ", explicit_split.size(),
                                                     " entries, expected pp(", pp, ")"));
    }
    int64_t sum = 0;
    for (size_t s = 0; s < explicit_split.size(); ++s) {
      if (explicit_split[s] < 1) {
        return absl::InvalidArgumentError(absl::StrCat("explicit split gives stage ", s, " ",
                                                       explicit_split[s],
                                                       " layers; every stage needs at least 1"));
      }
      sum += explicit_split[s];
    }
    if (sum != num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "explicit split sums to ", sum, " layers, expected num_layers(", num_layers, ")"));
    }
    int layer = 0;
    for (int s = 0; s < pp; ++s) {
      for (int k = 0; k < explicit_split[s]; ++k) stages[s].push_back(layer++);
    }
    return stages;
  }

  const int64_t parts = int64_t{pp} * virtual_chunks;
  if (num_layers % parts != 0) {
    if (virtual_chunks == 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_layers(", num_layers, ") is not divisible by pp(", pp,
                       "); choose a multiple of ", pp, " or give an explicit split"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "num_layers(", num_layers, ") is not divisible by pp(", pp, ")*virtual_chunks(",
        virtual_chunks, ")=", parts, "; choose a multiple of ", parts, " or fewer virtual chunks"));
  }
  const int per_chunk = static_cast<int>(num_layers / parts);
  for (int s = 0; s < pp; ++s) {
    stages[s].reserve(num_layers / pp);
    for (int v = 0; v < virtual_chunks; ++v) {
      const int first = (v * pp + s) * per_chunk;
      for (int k = 0; k < per_chunk; ++k) stages[s].push_back(first + k);
    }
  }
  return stages;
}

}  // namespace mt::layout
