#include "common/layout/layout.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::layout {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

using Groups = std::vector<std::vector<int>>;

RankLayout MakeLayout(int tp, int cp, int pp, int dp) {
  absl::StatusOr<RankLayout> layout = RankLayout::Create(ParallelDims{tp, cp, pp, dp});
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *std::move(layout);
}

// ---------------------------------------------------------------------------------------------
// Rank layout: exact tables.

// Verbatim from Megatron's initialize_model_parallel docstring.
TEST(RankLayoutTest, MegatronWorkedExample) {
  const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/4, /*dp=*/2);
  EXPECT_EQ(layout.world(), 16);
  EXPECT_EQ(layout.TensorGroups(),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(layout.DataGroups(),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(layout.PipelineGroups(),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
}

TEST(RankLayoutTest, WorkedExampleOtherFamilies) {
  const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/4, /*dp=*/2);
  EXPECT_EQ(
      layout.ContextGroups(),
      (Groups{
          {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}}));
  EXPECT_EQ(layout.DataWithContextGroups(), layout.DataGroups());
  EXPECT_EQ(layout.ModelParallelGroups(),
            (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  EXPECT_EQ(layout.TensorAndDataGroups(),
            (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(layout.TensorAndContextGroups(), layout.TensorGroups());
  EXPECT_EQ(layout.EmbeddingGroups(), (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(layout.PositionEmbeddingGroups(), (Groups{{0}, {1}, {2}, {3}}));
}

// Megatron's context_parallel_size docstring: 8 GPUs, TP=4, CP=2.
TEST(RankLayoutTest, MegatronContextParallelExample) {
  const RankLayout layout = MakeLayout(/*tp=*/4, /*cp=*/2, /*pp=*/1, /*dp=*/1);
  EXPECT_EQ(layout.ContextGroups(), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(layout.TensorGroups(), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(layout.DataGroups(), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(layout.DataWithContextGroups(), layout.ContextGroups());
}

TEST(RankLayoutTest, ContextAndDataTogether) {
  // TP=2, CP=2, DP=2, PP=2: rank = tp + 2*(cp + 2*(dp + 2*pp)).
  const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/2, /*pp=*/2, /*dp=*/2);
  EXPECT_EQ(layout.ContextGroups(),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(layout.DataGroups(),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(layout.DataWithContextGroups(),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(layout.PipelineGroups(),
            (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(layout.ModelParallelGroups(),
            (Groups{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}));
  EXPECT_EQ(layout.TensorAndDataGroups(),
            (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}, {8, 9, 12, 13}, {10, 11, 14, 15}}));
  EXPECT_EQ(layout.TensorAndContextGroups(),
            (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
}

TEST(RankLayoutTest, RankAndCoordTable) {
  struct Case {
    ParallelDims dims;
    RankCoord coord;
    int rank;
  };
  const Case cases[] = {
      {{1, 1, 1, 1}, {0, 0, 0, 0}, 0},
      {{2, 1, 4, 2}, {0, 0, 0, 0}, 0},
      {{2, 1, 4, 2}, {1, 0, 0, 0}, 1},
      {{2, 1, 4, 2}, {0, 0, 1, 0}, 2},
      {{2, 1, 4, 2}, {0, 0, 0, 1}, 4},
      {{2, 1, 4, 2}, {1, 0, 1, 3}, 15},
      {{2, 1, 4, 2}, {0, 0, 1, 2}, 10},
      {{4, 2, 1, 1}, {3, 1, 0, 0}, 7},
      {{2, 3, 5, 7}, {1, 2, 6, 4}, 1 + 2 * (2 + 3 * (6 + 7 * 4))},
      {{8, 1, 1, 1}, {5, 0, 0, 0}, 5},
      {{1, 1, 8, 1}, {0, 0, 0, 5}, 5},
      {{1, 1, 1, 8}, {0, 0, 5, 0}, 5},
      {{1, 8, 1, 1}, {0, 5, 0, 0}, 5},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dims.ToString() + " " + c.coord.ToString());
    MT_ASSERT_OK_AND_ASSIGN(const RankLayout layout, RankLayout::Create(c.dims));
    EXPECT_EQ(layout.Rank(c.coord), c.rank);
    EXPECT_EQ(layout.Coord(c.rank), c.coord);
  }
}

TEST(RankLayoutTest, PerRankHelpers) {
  const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/4, /*dp=*/2);
  // Rank 13 = tp 1 + 2*(dp 0 + 2*pp 3).
  EXPECT_EQ(layout.TensorRank(13), 1);
  EXPECT_EQ(layout.ContextRank(13), 0);
  EXPECT_EQ(layout.DataRank(13), 0);
  EXPECT_EQ(layout.PipelineRank(13), 3);
  EXPECT_FALSE(layout.IsFirstStage(13));
  EXPECT_TRUE(layout.IsLastStage(13));
  EXPECT_TRUE(layout.IsFirstStage(3));
  EXPECT_FALSE(layout.IsLastStage(3));
  EXPECT_FALSE(layout.IsFirstStage(6));
  EXPECT_FALSE(layout.IsLastStage(6));

  EXPECT_THAT(layout.TensorGroupOf(13), ElementsAre(12, 13));
  EXPECT_THAT(layout.DataGroupOf(13), ElementsAre(13, 15));
  EXPECT_THAT(layout.PipelineGroupOf(13), ElementsAre(1, 5, 9, 13));
  EXPECT_THAT(layout.ModelParallelGroupOf(13), ElementsAre(0, 1, 4, 5, 8, 9, 12, 13));
  EXPECT_THAT(layout.TensorAndDataGroupOf(13), ElementsAre(12, 13, 14, 15));
  EXPECT_THAT(layout.ContextGroupOf(13), ElementsAre(13));
  EXPECT_THAT(layout.DataWithContextGroupOf(13), ElementsAre(13, 15));
  EXPECT_THAT(layout.TensorAndContextGroupOf(13), ElementsAre(12, 13));
  EXPECT_THAT(layout.EmbeddingGroupOf(13), ElementsAre(1, 13));
  EXPECT_THAT(layout.EmbeddingGroupOf(1), ElementsAre(1, 13));
  EXPECT_THAT(layout.EmbeddingGroupOf(5), IsEmpty());
  EXPECT_THAT(layout.PositionEmbeddingGroupOf(1), ElementsAre(1));
  EXPECT_THAT(layout.PositionEmbeddingGroupOf(13), IsEmpty());

  EXPECT_EQ(layout.GroupRank(GroupKind::kPipeline, 13), 3);
  EXPECT_EQ(layout.GroupRank(GroupKind::kModel, 13), 7);
  EXPECT_EQ(layout.GroupRank(GroupKind::kTensorAndData, 13), 1);
  EXPECT_EQ(layout.GroupRank(GroupKind::kEmbedding, 13), 1);
  EXPECT_EQ(layout.GroupRank(GroupKind::kEmbedding, 1), 0);
  EXPECT_EQ(layout.GroupRank(GroupKind::kEmbedding, 5), -1);
  EXPECT_EQ(layout.GroupRank(GroupKind::kPositionEmbedding, 1), 0);
  EXPECT_EQ(layout.GroupRank(GroupKind::kPositionEmbedding, 13), -1);
}

TEST(RankLayoutTest, EmbeddingGroupsWithoutPipelineAreSingleRanks) {
  const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/1, /*dp=*/2);
  EXPECT_EQ(layout.EmbeddingGroups(), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(layout.PositionEmbeddingGroups(), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_THAT(layout.EmbeddingGroupOf(2), ElementsAre(2));
  EXPECT_EQ(layout.GroupRank(GroupKind::kEmbedding, 2), 0);
  EXPECT_TRUE(layout.IsFirstStage(2));
  EXPECT_TRUE(layout.IsLastStage(2));
}

TEST(RankLayoutTest, GroupKindNames) {
  std::vector<std::string> names;
  for (GroupKind kind : kAllGroupKinds) names.emplace_back(GroupKindName(kind));
  EXPECT_THAT(names, ElementsAre("tp", "cp", "dp", "dp-cp", "pp", "mp", "tp-dp", "tp-cp", "embd",
                                 "pos_embd"));
}

TEST(RankLayoutDeathTest, OutOfRangeRankIsAProgrammingError) {
  const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/4, /*dp=*/2);
  EXPECT_DEATH(layout.Coord(16), "rank 16 outside world 16");
  EXPECT_DEATH(layout.Rank(RankCoord{2, 0, 0, 0}), "outside tp=2 cp=1 pp=4 dp=2");
}

// ---------------------------------------------------------------------------------------------
// Validation.

TEST(LayoutValidateDimsTest, Table) {
  struct Case {
    ParallelDims dims;
    int world;
    std::string error;  // empty = OK
  };
  const Case cases[] = {
      {{2, 1, 4, 2}, 16, ""},
      {{1, 1, 1, 1}, 1, ""},
      {{8, 2, 4, 16}, 1024, ""},
      {{2, 1, 4, 3}, 16, "tp(2)*pp(4)*dp(3)=24 != world(16)"},
      {{2, 2, 4, 3}, 16, "tp(2)*cp(2)*pp(4)*dp(3)=48 != world(16)"},
      {{1, 1, 1, 1}, 2, "tp(1)*pp(1)*dp(1)=1 != world(2)"},
      {{0, 1, 1, 1}, 1, "tensor_model_parallel_size must be >= 1, got 0"},
      {{1, 0, 1, 1}, 1, "context_parallel_size must be >= 1, got 0"},
      {{1, 1, -1, 1}, 1, "pipeline_model_parallel_size must be >= 1, got -1"},
      {{1, 1, 1, 0}, 1, "data_parallel_size must be >= 1, got 0"},
      {{65537, 1, 1, 1}, 65537, "tensor_model_parallel_size must be <= 65536, got 65537"},
      {{1, 1, 1, 65537}, 65537, "data_parallel_size must be <= 65536, got 65537"},
      {{1, 1, 1, 1}, 0, "world size must be >= 1, got 0"},
      {{1, 1, 1, 1}, (1 << 20) + 1, "world size must be <= 1048576, got 1048577"},
      {{65536, 65536, 65536, 65536},
       1,
       "tp(65536)*cp(65536)*pp(65536)*dp(65536)=18446744073709551616 != world(1)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dims.ToString() + " world " + std::to_string(c.world));
    if (c.error.empty()) {
      EXPECT_THAT(ValidateDims(c.dims, c.world), IsOk());
    } else {
      EXPECT_THAT(ValidateDims(c.dims, c.world),
                  StatusIs(absl::StatusCode::kInvalidArgument, c.error));
    }
  }
}

TEST(LayoutResolveDimsTest, Table) {
  struct Case {
    int tp, cp, pp, dp, world;
    ParallelDims want;
    std::string error;  // empty = OK
  };
  const Case cases[] = {
      {2, 1, 4, 0, 16, {2, 1, 4, 2}, ""},
      {2, 1, 4, 2, 16, {2, 1, 4, 2}, ""},
      {1, 1, 1, 0, 1, {1, 1, 1, 1}, ""},
      {2, 2, 2, 0, 64, {2, 2, 2, 8}, ""},
      {4,
       1,
       1,
       0,
       10,
       {},
       "world(10) is not divisible by tp(4)*pp(1)=4; choose a world size "
       "that is a multiple of 4"},
      {4,
       1,
       1,
       0,
       2,
       {},
       "world(2) is not divisible by tp(4)*pp(1)=4; choose a world size "
       "that is a multiple of 4"},
      {2,
       2,
       2,
       0,
       12,
       {},
       "world(12) is not divisible by tp(2)*cp(2)*pp(2)=8; choose a world "
       "size that is a multiple of 8"},
      {2, 1, 4, 3, 16, {}, "tp(2)*pp(4)*dp(3)=24 != world(16)"},
      {1, 1, 1, -1, 4, {}, "data_parallel_size (0 = auto) must be >= 0, got -1"},
      {0, 1, 1, 0, 4, {}, "tensor_model_parallel_size must be >= 1, got 0"},
      {1, 1, 0, 0, 4, {}, "pipeline_model_parallel_size must be >= 1, got 0"},
      {1, 1, 1, 0, 0, {}, "world size must be >= 1, got 0"},
      {1, 1, 1, 0, 1 << 20, {}, "data_parallel_size must be <= 65536, got 1048576"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.tp, " ", c.cp, " ", c.pp, " ", c.dp, " ", c.world));
    absl::StatusOr<ParallelDims> dims = ResolveDims(c.tp, c.cp, c.pp, c.dp, c.world);
    if (c.error.empty()) {
      ASSERT_THAT(dims, IsOk());
      EXPECT_EQ(*dims, c.want) << dims->ToString();
    } else {
      EXPECT_THAT(dims, StatusIs(absl::StatusCode::kInvalidArgument, c.error));
    }
  }
}

TEST(RankLayoutTest, CreateRejectsBadDims) {
  EXPECT_THAT(RankLayout::Create(ParallelDims{0, 1, 1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor_model_parallel_size must be >= 1, got 0"));
  EXPECT_THAT(RankLayout::Create(ParallelDims{64, 1, 1, 65536}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "world size tp(64)*pp(1)*dp(65536)=4194304 exceeds the limit of 1048576"));
  EXPECT_THAT(RankLayout::Create(ParallelDims{1, 1, 1, 65536}), IsOk());
}

TEST(LayoutParallelDimsTest, WorldSaturates) {
  EXPECT_EQ((ParallelDims{2, 2, 4, 3}.world()), 48);
  EXPECT_EQ((ParallelDims{65536, 65536, 65536, 65536}.world()), INT64_MAX);
}

// ---------------------------------------------------------------------------------------------
// Exhaustive check against a brute-force oracle: every factorisation world = tp*cp*pp*dp for
// world 1..64 with cp restricted to {1, 2} (the cp axis is handled by the same code as the
// others; 1 and 2 cover "off" and "on" while keeping the test well under a second).

// Axis positions in the oracle's coordinate arrays.
constexpr int kT = 0, kC = 1, kD = 2, kP = 3;

struct Family {
  GroupKind kind;
  std::array<bool, 4> varies;  // indexed by kT, kC, kD, kP
};

// Written from Megatron's tokens, independently of layout.cc.
const Family kFamilies[] = {
    {GroupKind::kTensor, {true, false, false, false}},
    {GroupKind::kContext, {false, true, false, false}},
    {GroupKind::kData, {false, false, true, false}},
    {GroupKind::kDataWithContext, {false, true, true, false}},
    {GroupKind::kPipeline, {false, false, false, true}},
    {GroupKind::kModel, {true, false, false, true}},
    {GroupKind::kTensorAndData, {true, false, true, false}},
    {GroupKind::kTensorAndContext, {true, true, false, false}},
};

struct Oracle {
  std::vector<std::array<int, 4>> coord;  // by rank
  std::map<GroupKind, Groups> groups;
};

Oracle BuildOracle(int tp, int cp, int pp, int dp) {
  Oracle o;
  // Ranks are handed out in nested-loop order with tp innermost: that *is* the definition
  // "tp fastest, then cp, then dp, then pp".
  for (int p = 0; p < pp; ++p) {
    for (int d = 0; d < dp; ++d) {
      for (int c = 0; c < cp; ++c) {
        for (int t = 0; t < tp; ++t) o.coord.push_back({t, c, d, p});
      }
    }
  }
  const int world = static_cast<int>(o.coord.size());
  auto collect = [&](auto key_of, auto member) {
    std::map<std::array<int, 4>, std::vector<int>> by_key;
    for (int r = 0; r < world; ++r) {
      if (member(o.coord[r])) by_key[key_of(o.coord[r])].push_back(r);  // ascending
    }
    Groups groups;
    for (auto& [key, ranks] : by_key) groups.push_back(ranks);
    std::sort(groups.begin(), groups.end(),
              [](const std::vector<int>& a, const std::vector<int>& b) { return a[0] < b[0]; });
    return groups;
  };
  for (const Family& f : kFamilies) {
    o.groups[f.kind] = collect(
        [&](std::array<int, 4> c) {
          for (int a = 0; a < 4; ++a) {
            if (f.varies[a]) c[a] = -1;
          }
          return c;
        },
        [](const std::array<int, 4>&) { return true; });
  }
  auto fixed_pipeline = [](std::array<int, 4> c) {
    c[kP] = -1;
    return c;
  };
  o.groups[GroupKind::kEmbedding] = collect(
      fixed_pipeline, [&](const std::array<int, 4>& c) { return c[kP] == 0 || c[kP] == pp - 1; });
  o.groups[GroupKind::kPositionEmbedding] =
      collect(fixed_pipeline, [](const std::array<int, 4>& c) { return c[kP] == 0; });
  return o;
}

TEST(RankLayoutExhaustiveTest, EveryFactorisationUpToWorld64MatchesOracle) {
  int configs = 0;
  for (int world = 1; world <= 64; ++world) {
    for (int cp = 1; cp <= 2; ++cp) {
      for (int tp = 1; tp <= world; ++tp) {
        for (int pp = 1; pp <= world; ++pp) {
          if (world % (tp * cp * pp) != 0) continue;
          const int dp = world / (tp * cp * pp);
          const ParallelDims dims{tp, cp, pp, dp};
          SCOPED_TRACE(dims.ToString());
          ++configs;
          ASSERT_THAT(ValidateDims(dims, world), IsOk());
          MT_ASSERT_OK_AND_ASSIGN(const ParallelDims resolved, ResolveDims(tp, cp, pp, 0, world));
          ASSERT_EQ(resolved, dims);
          MT_ASSERT_OK_AND_ASSIGN(const RankLayout layout, RankLayout::Create(dims));
          ASSERT_EQ(layout.world(), world);
          const Oracle oracle = BuildOracle(tp, cp, pp, dp);
          ASSERT_EQ(static_cast<int>(oracle.coord.size()), world);

          // Rank <-> coordinate round trip.
          for (int r = 0; r < world; ++r) {
            const std::array<int, 4>& c = oracle.coord[r];
            const RankCoord want{c[kT], c[kC], c[kD], c[kP]};
            ASSERT_EQ(layout.Coord(r), want) << "rank " << r;
            ASSERT_EQ(layout.Rank(want), r);
            ASSERT_EQ(layout.IsFirstStage(r), c[kP] == 0);
            ASSERT_EQ(layout.IsLastStage(r), c[kP] == pp - 1);
          }

          for (GroupKind kind : kAllGroupKinds) {
            SCOPED_TRACE(std::string(GroupKindName(kind)));
            const Groups& want = oracle.groups.at(kind);
            const Groups got = layout.Groups(kind);
            ASSERT_EQ(got, want);

            // Membership: partitioning families hold every rank exactly once; embedding
            // families hold exactly the first/last-stage ranks once.
            std::vector<int> seen(world, 0);
            for (size_t g = 0; g < got.size(); ++g) {
              for (size_t i = 0; i < got[g].size(); ++i) ++seen[got[g][i]];
            }
            for (int r = 0; r < world; ++r) {
              const int stage = oracle.coord[r][kP];
              int expected = 1;
              if (kind == GroupKind::kEmbedding) expected = (stage == 0 || stage == pp - 1);
              if (kind == GroupKind::kPositionEmbedding) expected = (stage == 0);
              ASSERT_EQ(seen[r], expected) << "rank " << r;
            }

            // Sizes.
            int size = 1;
            for (const Family& f : kFamilies) {
              if (f.kind != kind) continue;
              const int sizes[4] = {tp, cp, dp, pp};
              for (int a = 0; a < 4; ++a) size *= f.varies[a] ? sizes[a] : 1;
            }
            if (kind == GroupKind::kEmbedding) size = pp == 1 ? 1 : 2;
            for (const std::vector<int>& group : got)
              ASSERT_EQ(static_cast<int>(group.size()), size);
            if (kind != GroupKind::kEmbedding && kind != GroupKind::kPositionEmbedding) {
              ASSERT_EQ(static_cast<int>(got.size()) * size, world);
            } else {
              ASSERT_EQ(static_cast<int>(got.size()), world / pp);
            }

            // GroupOf / GroupRank agree with the group list.
            std::vector<int> group_of(world, -1), index_in(world, -1);
            for (size_t g = 0; g < want.size(); ++g) {
              for (size_t i = 0; i < want[g].size(); ++i) {
                group_of[want[g][i]] = static_cast<int>(g);
                index_in[want[g][i]] = static_cast<int>(i);
              }
            }
            for (int r = 0; r < world; ++r) {
              const std::vector<int> expected =
                  group_of[r] < 0 ? std::vector<int>{} : want[group_of[r]];
              ASSERT_EQ(layout.GroupOf(kind, r), expected) << "rank " << r;
              ASSERT_EQ(layout.GroupRank(kind, r), index_in[r]) << "rank " << r;
            }
          }
          ASSERT_EQ(layout.TensorRank(world - 1), tp - 1);
          ASSERT_EQ(layout.PipelineRank(world - 1), pp - 1);
        }
      }
    }
  }
  // Ordered factorisations into (tp, pp, dp) of world 1..64, plus those of world/2 for cp = 2.
  EXPECT_EQ(configs, 1096);
}

// ---------------------------------------------------------------------------------------------
// Placement.

std::vector<std::string> Slots(const std::vector<std::pair<std::string, int>>& runs) {
  std::vector<std::string> slots;
  for (const auto& [node, count] : runs) slots.insert(slots.end(), count, node);
  return slots;
}

std::vector<int> Iota(int from, int count) {
  std::vector<int> v;
  for (int i = 0; i < count; ++i) v.push_back(from + i);
  return v;
}

std::vector<int> Concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every TP group on one node, on consecutive entries of that node's slot list, in rank order;
// slots distinct and in range.
void ExpectValidPlacement(const RankLayout& layout, const std::vector<std::string>& slot_nodes,
                          const std::vector<int>& placement) {
  ASSERT_EQ(static_cast<int>(placement.size()), layout.world());
  std::map<std::string, std::vector<int>> node_slots;
  std::vector<int> position(slot_nodes.size());
  for (size_t s = 0; s < slot_nodes.size(); ++s) {
    position[s] = static_cast<int>(node_slots[slot_nodes[s]].size());
    node_slots[slot_nodes[s]].push_back(static_cast<int>(s));
  }
  std::set<int> used;
  for (int slot : placement) {
    ASSERT_GE(slot, 0);
    ASSERT_LT(slot, static_cast<int>(slot_nodes.size()));
    ASSERT_TRUE(used.insert(slot).second) << "slot " << slot << " used twice";
  }
  for (const std::vector<int>& group : layout.TensorGroups()) {
    for (size_t i = 1; i < group.size(); ++i) {
      const int prev = placement[group[i - 1]], cur = placement[group[i]];
      ASSERT_EQ(slot_nodes[cur], slot_nodes[prev]) << "TP group split at rank " << group[i];
      ASSERT_EQ(position[cur], position[prev] + 1)
          << "TP group not consecutive at rank " << group[i];
    }
  }
}

TEST(LayoutPlacementTest, WorkedExampleOnTwoNodesIsIdentity) {
  const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/4, /*dp=*/2);
  const std::vector<std::string> slots = Slots({{"a", 8}, {"b", 8}});
  MT_ASSERT_OK_AND_ASSIGN(const std::vector<int> placement, PlaceRanksOnSlots(layout, slots));
  EXPECT_EQ(placement, Iota(0, 16));
  ExpectValidPlacement(layout, slots, placement);
}

TEST(LayoutPlacementTest, InterleavedFreeListUsesOneNode) {
  const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/2, /*dp=*/2);
  std::vector<std::string> slots;
  for (int i = 0; i < 8; ++i) {
    slots.push_back("a");
    slots.push_back("b");
  }
  MT_ASSERT_OK_AND_ASSIGN(const std::vector<int> placement, PlaceRanksOnSlots(layout, slots));
  EXPECT_EQ(placement, (std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14}));
  ExpectValidPlacement(layout, slots, placement);
}

TEST(LayoutPlacementTest, FewestNodesBeforeNodeOrder) {
  // a holds one TP group, b and c four each: b and c alone hold all eight.
  const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/2, /*dp=*/4);
  const std::vector<std::string> slots = Slots({{"a", 2}, {"b", 8}, {"c", 8}});
  MT_ASSERT_OK_AND_ASSIGN(const std::vector<int> placement, PlaceRanksOnSlots(layout, slots));
  EXPECT_EQ(placement, Iota(2, 16));
  ExpectValidPlacement(layout, slots, placement);
}

TEST(LayoutPlacementTest, SmallJobTakesTheEarliestNodeThatHoldsIt) {
  const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/1, /*dp=*/2);
  const std::vector<std::string> slots = Slots({{"a", 3}, {"b", 8}, {"c", 4}});
  MT_ASSERT_OK_AND_ASSIGN(const std::vector<int> placement, PlaceRanksOnSlots(layout, slots));
  EXPECT_EQ(placement, (std::vector<int>{3, 4, 5, 6}));
}

TEST(LayoutPlacementTest, LeftoverSlotsThatCannotHoldAGroupAreSkipped) {
  // TP=4 on two nodes of 6 free slots: one group per node, slots 4-5 and 10-11 stay free.
  const RankLayout layout = MakeLayout(/*tp=*/4, /*cp=*/1, /*pp=*/2, /*dp=*/1);
  const std::vector<std::string> slots = Slots({{"a", 6}, {"b", 6}});
  MT_ASSERT_OK_AND_ASSIGN(const std::vector<int> placement, PlaceRanksOnSlots(layout, slots));
  EXPECT_EQ(placement, Concat(Iota(0, 4), Iota(6, 4)));
  ExpectValidPlacement(layout, slots, placement);
}

TEST(LayoutPlacementTest, FillsNodesInOrder) {
  const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/2, /*dp=*/2);
  const std::vector<std::string> slots = Slots({{"a", 6}, {"b", 6}});
  MT_ASSERT_OK_AND_ASSIGN(const std::vector<int> placement, PlaceRanksOnSlots(layout, slots));
  EXPECT_EQ(placement, Iota(0, 8));
}

TEST(LayoutPlacementTest, Failures) {
  {
    const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/4, /*dp=*/2);
    EXPECT_THAT(PlaceRanksOnSlots(layout, Slots({{"a", 8}, {"b", 4}})),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         "world 16 needs 16 free GPU slots, only 12 given"));
  }
  {
    const RankLayout layout = MakeLayout(/*tp=*/4, /*cp=*/1, /*pp=*/1, /*dp=*/1);
    EXPECT_THAT(PlaceRanksOnSlots(layout, Slots({{"n0", 2}, {"n1", 2}, {"n2", 3}, {"n3", 1}})),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         "tensor parallel group of 4 ranks does not fit on any node: largest "
                         "free node 'n2' has 3 slots"));
  }
  {
    const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/1, /*dp=*/4);
    EXPECT_THAT(PlaceRanksOnSlots(layout, Slots({{"a", 3}, {"b", 3}, {"c", 3}})),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         "tensor parallel groups of 2 ranks cannot span nodes: 4 groups needed, "
                         "the free slots hold 3 (a: 3 slots, b: 3 slots, c: 3 slots)"));
  }
  {
    const RankLayout layout = MakeLayout(/*tp=*/2, /*cp=*/1, /*pp=*/1, /*dp=*/12);
    std::vector<std::pair<std::string, int>> runs;
    for (int i = 0; i < 10; ++i) runs.push_back({absl::StrCat("n", i), 3});
    EXPECT_THAT(PlaceRanksOnSlots(layout, Slots(runs)),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         "tensor parallel groups of 2 ranks cannot span nodes: 12 groups "
                         "needed, the free slots hold 10 (n0: 3 slots, n1: 3 slots, n2: 3 "
                         "slots, n3: 3 slots, n4: 3 slots, n5: 3 slots, n6: 3 slots, n7: 3 "
                         "slots, and 2 more nodes)"));
  }
  {
    const RankLayout layout = MakeLayout(/*tp=*/1, /*cp=*/1, /*pp=*/1, /*dp=*/2);
    EXPECT_THAT(PlaceRanksOnSlots(layout, {"a", "", "a"}),
                StatusIs(absl::StatusCode::kInvalidArgument, "slot 1 has an empty node name"));
  }
}

// Many random free lists (fixed seed; raw mt19937 output, which the standard pins down, rather
// than <random> distributions, which it does not): a placement succeeds exactly when the whole
// TP groups fit, is valid, uses the fewest nodes, and among those the earliest node set.
TEST(LayoutPlacementTest, RandomNodeMapsNeverSplitTensorGroups) {
  std::mt19937 rng(20240607);
  auto uniform = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  int placed = 0, refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const int tp = 1 << uniform(0, 3);
    const int cp = uniform(1, 2);
    const int pp = uniform(1, 4);
    const int dp = uniform(1, 4);
    const RankLayout layout = MakeLayout(tp, cp, pp, dp);
    const int world = layout.world();

    const int num_nodes = uniform(1, 6);
    std::vector<int> free(num_nodes);
    std::vector<std::string> slots;
    for (int n = 0; n < num_nodes; ++n) {
      free[n] = uniform(0, 16);
      slots.insert(slots.end(), free[n], absl::StrCat("node", n));
    }
    for (size_t i = slots.size(); i > 1; --i) std::swap(slots[i - 1], slots[rng() % i]);
    SCOPED_TRACE(
        absl::StrCat("iter ", iter, " ", layout.dims().ToString(), " slots ", slots.size()));

    // Nodes in order of their first slot, with how many whole TP groups each holds.
    std::vector<std::string> order;
    std::map<std::string, int> capacity;
    for (const std::string& node : slots) {
      if (capacity.count(node) == 0) order.push_back(node);
      capacity[node] += 1;
    }
    std::vector<int> caps;
    for (const std::string& node : order) caps.push_back(capacity[node] / tp);
    const int groups = world / tp;
    int total = 0;
    for (int c : caps) total += c;

    absl::StatusOr<std::vector<int>> placement = PlaceRanksOnSlots(layout, slots);
    if (static_cast<int>(slots.size()) < world || total < groups) {
      ASSERT_THAT(placement, StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
      ++refused;
      continue;
    }
    ASSERT_THAT(placement, IsOk());
    ++placed;
    ExpectValidPlacement(layout, slots, *placement);
    MT_ASSERT_OK_AND_ASSIGN(const std::vector<int> again, PlaceRanksOnSlots(layout, slots));
    ASSERT_EQ(again, *placement);

    // Brute force over node subsets: the fewest nodes, then the lexicographically earliest.
    const int n = static_cast<int>(order.size());
    std::vector<int> best;
    for (int mask = 1; mask < (1 << n); ++mask) {
      std::vector<int> subset;
      int sum = 0;
      for (int i = 0; i < n; ++i) {
        if (mask & (1 << i)) {
          subset.push_back(i);
          sum += caps[i];
        }
      }
      if (sum < groups) continue;
      if (best.empty() || subset.size() < best.size() ||
          (subset.size() == best.size() && subset < best)) {
        best = subset;
      }
    }
    std::set<int> used_set;
    for (int slot : *placement) {
      for (int i = 0; i < n; ++i) {
        if (order[i] == slots[slot]) used_set.insert(i);
      }
    }
    ASSERT_EQ(std::vector<int>(used_set.begin(), used_set.end()), best);
  }
  EXPECT_GT(placed, 500);
  EXPECT_GT(refused, 100);
}

// ---------------------------------------------------------------------------------------------
// Pipeline layer split.

TEST(LayoutStageLayersTest, Table) {
  struct Case {
    int num_layers, pp, chunks;
    std::vector<int> split;
    Groups want;
  };
  const Case cases[] = {
      {8, 1, 1, {}, {{0, 1, 2, 3, 4, 5, 6, 7}}},
      {8, 2, 1, {}, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {24, 4, 1, {}, {Iota(0, 6), Iota(6, 6), Iota(12, 6), Iota(18, 6)}},
      {4, 4, 1, {}, {{0}, {1}, {2}, {3}}},
      {8, 2, 2, {}, {{0, 1, 4, 5}, {2, 3, 6, 7}}},
      // Megatron's docstring: 16 layers, pp=4, 2 chunks (there 1-based).
      {16, 4, 2, {}, {{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}}},
      {12, 3, 4, {}, {{0, 3, 6, 9}, {1, 4, 7, 10}, {2, 5, 8, 11}}},
      {12, 2, 3, {}, {{0, 1, 4, 5, 8, 9}, {2, 3, 6, 7, 10, 11}}},
      {10, 3, 1, {3, 4, 3}, {{0, 1, 2}, {3, 4, 5, 6}, {7, 8, 9}}},
      {10, 3, 1, {1, 1, 8}, {{0}, {1}, Iota(2, 8)}},
      {5, 1, 1, {5}, {{0, 1, 2, 3, 4}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.num_layers, " layers pp ", c.pp, " chunks ", c.chunks));
    MT_ASSERT_OK_AND_ASSIGN(const Groups got, StageLayers(c.num_layers, c.pp, c.chunks, c.split));
    EXPECT_EQ(got, c.want);
  }
}

TEST(LayoutStageLayersTest, Errors) {
  struct Case {
    int num_layers, pp, chunks;
    std::vector<int> split;
    std::string error;
  };
  const Case cases[] = {
      {0, 1, 1, {}, "num_layers must be >= 1, got 0"},
      {8, 0, 1, {}, "pp must be >= 1, got 0"},
      {8, 2, 0, {}, "virtual_chunks must be >= 1, got 0"},
      {10,
       4,
       1,
       {},
       "num_layers(10) is not divisible by pp(4); choose a multiple of 4 or give "
       "an explicit split"},
      {12,
       4,
       2,
       {},
       "num_layers(12) is not divisible by pp(4)*virtual_chunks(2)=8; choose a "
       "multiple of 8 or fewer virtual chunks"},
      {8, 1, 2, {}, "interleaving (virtual_chunks=2) needs pp > 1; use virtual_chunks=1"},
      {8,
       2,
       2,
       {4, 4},
       "an explicit split cannot be combined with interleaving "
       "(virtual_chunks=2); use virtual_chunks=1 or an even split"},
      {8, 4, 1, {4, 4}, "explicit split has 2 entries, expected pp(4)"},
      {8, 3, 1, {4, 0, 4}, "explicit split gives stage 1 0 layers; every stage needs at least 1"},
      {12, 3, 1, {4, 4, 3}, "explicit split sums to 11 layers, expected num_layers(12)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.num_layers, " layers pp ", c.pp, " chunks ", c.chunks));
    EXPECT_THAT(StageLayers(c.num_layers, c.pp, c.chunks, c.split),
                StatusIs(absl::StatusCode::kInvalidArgument, c.error));
  }
}

// Every split covers each layer exactly once; interleaved chunks follow Megatron's formula.
TEST(LayoutStageLayersTest, EvenSplitsCoverEveryLayerOnce) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int chunks = 1; chunks <= 4; ++chunks) {
      if (chunks > 1 && pp == 1) continue;
      for (int per_chunk = 1; per_chunk <= 3; ++per_chunk) {
        const int layers = pp * chunks * per_chunk;
        MT_ASSERT_OK_AND_ASSIGN(const Groups stages, StageLayers(layers, pp, chunks, {}));
        ASSERT_EQ(static_cast<int>(stages.size()), pp);
        std::vector<int> seen(layers, 0);
        for (int s = 0; s < pp; ++s) {
          ASSERT_EQ(static_cast<int>(stages[s].size()), chunks * per_chunk);
          for (int v = 0; v < chunks; ++v) {
            for (int k = 0; k < per_chunk; ++k) {
              const int layer = stages[s][v * per_chunk + k];
              ASSERT_EQ(layer, (v * pp + s) * per_chunk + k);
              ++seen[layer];
            }
          }
        }
        for (int l = 0; l < layers; ++l) ASSERT_EQ(seen[l], 1) << "layer " << l;
      }
    }
  }
}

}  // namespace
}  // namespace mt::layout
