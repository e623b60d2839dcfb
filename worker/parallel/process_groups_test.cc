// The groups of every layout of 8 ranks, built in one process (one thread per rank over one
// HashStore, Gloo): membership against the layout, and one all-reduce per group whose sum
// proves the group holds exactly those ranks.
#include "worker/parallel/process_groups.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "common/base/status_matchers.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/rank_threads_testing.h"

namespace mt::parallel {
namespace {

// Sum of (global rank + 1) over the group, all-reduced: equals the sum over its ranks.
double GroupSum(const GroupHandle& h, int rank) {
  auto t = torch::full({1}, static_cast<double>(rank + 1), torch::kFloat64);
  if (h.active()) {
    std::vector<at::Tensor> v = {t};
    EXPECT_TRUE(Wait(h.group->allreduce(v), h.name).ok());
  }
  return t.item<double>();
}

double Expected(const GroupHandle& h) {
  double s = 0;
  for (int r : h.ranks) s += r + 1;
  return s;
}

class ProcessGroupsTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(ProcessGroupsTest, GroupsMatchTheLayoutAndReduceOverTheirRanks) {
  if (!HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  const auto [tp, pp, dp] = GetParam();
  const std::vector<std::string> errors = testing::RunRanks(
      testing::LayoutOf(tp, pp, dp), [&](int rank, std::shared_ptr<ProcessGroups> groups) {
        const ProcessGroups& g = *groups;
        EXPECT_EQ(g.tp().size, tp);
        EXPECT_EQ(g.pp().size, pp);
        EXPECT_EQ(g.dp().size, dp);
        EXPECT_EQ(g.model_parallel().size, tp * pp);
        // Megatron's order tp-cp-dp-pp: rank = tp + tp_size * (dp + dp_size * pp).
        EXPECT_EQ(g.tp_rank(), rank % tp);
        EXPECT_EQ(g.dp_rank(), (rank / tp) % dp);
        EXPECT_EQ(g.pp_rank(), rank / (tp * dp));
        EXPECT_EQ(g.embedding().member(), g.is_first_stage() || g.is_last_stage());
        for (const GroupHandle* h : {&g.world(), &g.tp(), &g.pp(), &g.dp(), &g.model_parallel()}) {
          EXPECT_DOUBLE_EQ(GroupSum(*h, rank), Expected(*h)) << h->name << " rank " << rank;
        }
        if (g.embedding().member()) {
          EXPECT_DOUBLE_EQ(GroupSum(g.embedding(), rank), Expected(g.embedding()));
        }
        auto collectives = MakeCollectives(groups, 1 << 20);
        EXPECT_EQ(collectives->dp_size(), dp);
        EXPECT_EQ(collectives->dp_rank(), g.dp_rank());
        auto mean = collectives->AverageScalar(rank);
        ASSERT_TRUE(mean.ok()) << mean.status();
        double want = 0;
        for (int r : g.dp().ranks) want += r;
        EXPECT_DOUBLE_EQ(*mean, want / dp);
      });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Layouts, ProcessGroupsTest,
                         ::testing::Values(std::make_tuple(1, 1, 1), std::make_tuple(2, 1, 1),
                                           std::make_tuple(1, 2, 1), std::make_tuple(1, 1, 2),
                                           std::make_tuple(2, 2, 2), std::make_tuple(1, 4, 2),
                                           std::make_tuple(4, 2, 1), std::make_tuple(2, 1, 4)));

TEST(ProcessGroupsSingle, EveryGroupIsOneRankWithoutACommunicator) {
  auto g = ProcessGroups::Single();
  for (const GroupHandle* h :
       {&g->world(), &g->tp(), &g->pp(), &g->dp(), &g->embedding(), &g->model_parallel()}) {
    EXPECT_EQ(h->size, 1);
    EXPECT_TRUE(h->member());
    EXPECT_FALSE(h->active());
    EXPECT_EQ(h->group.get(), nullptr);
  }
  EXPECT_TRUE(g->is_first_stage());
  EXPECT_TRUE(g->is_last_stage());
}

}  // namespace
}  // namespace mt::parallel
