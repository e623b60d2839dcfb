// The communication recorder: host spans (count, seconds, what Take hands out and resets, a
// failed op dropped), its thread safety and cost, and every collective of worker/parallel
// recorded under its collective and group when 4 ranks (tp 2 x dp 2, threads over Gloo) run
// them.
#include "worker/parallel/comm_stats.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "worker/parallel/dist.h"
#include "worker/parallel/grad_reducer.h"
#include "worker/parallel/process_groups.h"
#include "worker/parallel/rank_threads_testing.h"
#include "worker/parallel/tensor_parallel.h"

namespace mt::parallel {
namespace {

using Totals = std::map<std::pair<std::string, std::string>, CommTime>;

Totals ByKey(const std::vector<CommTime>& v) {
  Totals out;
  for (const CommTime& t : v) out[{t.collective, t.group}] = t;
  return out;
}

TEST(CommStatsTest, HostSpansCountCallsAndSeconds) {
  CommStats stats;
  CommStats::Span a = stats.Start(Collective::kAllReduce, CommGroup::kTp);
  absl::SleepFor(absl::Milliseconds(20));
  a.Finish();
  a.Finish();  // once only
  CommStats::Span b = stats.Start(Collective::kAllReduce, CommGroup::kTp);
  b.Finish();
  stats.Start(Collective::kSend, CommGroup::kPp).Finish();
  {
    // Dropped: the op failed before its wait returned.
    CommStats::Span failed = stats.Start(Collective::kRecv, CommGroup::kPp);
  }
  CommStats::Span moved = stats.Start(Collective::kAllGather, CommGroup::kDp);
  CommStats::Span to = std::move(moved);
  moved.Finish();  // moved-from: nothing
  to.Finish();
  CommStats::Span().Finish();  // a default span records nothing

  const std::vector<CommTime> got = stats.Take();
  ASSERT_EQ(got.size(), 3u);
  // Enum order: collective, then group.
  EXPECT_EQ(got[0].collective, "all_reduce");
  EXPECT_EQ(got[0].group, "tp");
  EXPECT_EQ(got[0].calls, 2);
  EXPECT_GE(got[0].seconds, 0.02);
  EXPECT_LT(got[0].seconds, 5.0);
  EXPECT_EQ(got[1].collective, "all_gather");
  EXPECT_EQ(got[1].group, "dp");
  EXPECT_EQ(got[1].calls, 1);
  EXPECT_EQ(got[2].collective, "send");
  EXPECT_EQ(got[2].group, "pp");
  EXPECT_EQ(got[2].calls, 1);
  EXPECT_TRUE(stats.Take().empty()) << "Take hands out what came since the last one";
  EXPECT_EQ(stats.pending(), 0);
}

// Two ops in flight together on one group (DP buckets) count the time the group was busy
// once; on two groups each counts its whole duration.
TEST(CommStatsTest, OpsInFlightTogetherOnOneGroupCountTheirUnionOnce) {
  CommStats stats;
  const absl::Time t0 = absl::Now();
  CommStats::Span a = stats.Start(Collective::kAllReduce, CommGroup::kDp);
  CommStats::Span other = stats.Start(Collective::kAllReduce, CommGroup::kTp);
  absl::SleepFor(absl::Milliseconds(20));
  CommStats::Span b = stats.Start(Collective::kAllReduce, CommGroup::kDp);
  absl::SleepFor(absl::Milliseconds(20));
  a.Finish();
  absl::SleepFor(absl::Milliseconds(20));
  b.Finish();
  other.Finish();
  const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
  const Totals got = ByKey(stats.Take());
  const CommTime& dp = got.at({"all_reduce", "dp"});
  EXPECT_EQ(dp.calls, 2);
  // a: 40 ms, b: the 20 ms after a's end (not its 40 ms).
  EXPECT_GE(dp.seconds, 0.06);
  EXPECT_LE(dp.seconds, wall);
  const CommTime& tp = got.at({"all_reduce", "tp"});
  EXPECT_EQ(tp.calls, 1);
  EXPECT_GE(tp.seconds, 0.06);
  EXPECT_GT(dp.seconds + tp.seconds, wall) << "different groups overlap freely";
  // An op after the group went idle counts from its own start.
  absl::SleepFor(absl::Milliseconds(30));
  const absl::Time t1 = absl::Now();
  stats.Start(Collective::kAllGather, CommGroup::kDp).Finish();
  const double since = absl::ToDoubleSeconds(absl::Now() - t1);
  EXPECT_LE(stats.Take().at(0).seconds, since);
}

TEST(CommStatsTest, NamesAreTheDocumentedLabelValues) {
  const std::vector<std::string> collectives = {"all_reduce", "all_gather", "reduce_scatter",
                                                "broadcast",  "send",       "recv"};
  for (int c = 0; c < kNumCollectives; ++c) {
    EXPECT_EQ(CollectiveName(static_cast<Collective>(c)), collectives[c]);
  }
  const std::vector<std::string> groups = {"world", "tp",        "pp",
                                           "dp",    "embedding", "model_parallel"};
  for (int g = 0; g < kNumCommGroups; ++g) {
    EXPECT_EQ(CommGroupName(static_cast<CommGroup>(g)), groups[g]);
  }
}

TEST(CommStatsTest, ThreadsRecordIntoOneRecorder) {
  CommStats stats;
  constexpr int kThreads = 4, kSpans = 2000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&stats, i] {
      for (int n = 0; n < kSpans; ++n) {
        stats.Start(i % 2 == 0 ? Collective::kAllReduce : Collective::kAllGather, CommGroup::kDp)
            .Finish();
      }
    });
  }
  for (auto& t : threads) t.join();
  const Totals got = ByKey(stats.Take());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got.at({"all_reduce", "dp"}).calls, kThreads / 2 * kSpans);
  EXPECT_EQ(got.at({"all_gather", "dp"}).calls, kThreads / 2 * kSpans);
}

// The recorder's share of a collective: two clock reads and a lock. Generous bound (a loaded
// 2-core CI machine): 5 us per span; it measures about 0.1 us.
TEST(CommStatsTest, ASpanCostsMicroseconds) {
  CommStats stats;
  constexpr int kSpans = 100000;
  const absl::Time start = absl::Now();
  for (int n = 0; n < kSpans; ++n) stats.Start(Collective::kAllReduce, CommGroup::kTp).Finish();
  const double per_span = absl::ToDoubleSeconds(absl::Now() - start) / kSpans;
  EXPECT_LT(per_span, 5e-6);
  EXPECT_EQ(stats.Take().at(0).calls, kSpans);
}

TEST(CommStatsGroupsTest, EveryGroupOfARankSharesItsRecorderUnderItsLabel) {
  auto single = ProcessGroups::Single();
  ASSERT_NE(single->comm_stats(), nullptr);
  const std::vector<std::pair<const GroupHandle*, CommGroup>> handles = {
      {&single->world(), CommGroup::kWorld},
      {&single->tp(), CommGroup::kTp},
      {&single->pp(), CommGroup::kPp},
      {&single->dp(), CommGroup::kDp},
      {&single->embedding(), CommGroup::kEmbedding},
      {&single->model_parallel(), CommGroup::kModelParallel}};
  for (const auto& [h, kind] : handles) {
    EXPECT_EQ(h->comm_stats.get(), single->comm_stats()) << h->name;
    EXPECT_EQ(h->comm_group, kind) << h->name;
  }
}

// tp 2 x dp 2: the tensor-parallel collectives over "tp" (Gloo's reduce-scatter is an
// all-reduce), the DP buckets and the distributed optimizer's gathers over "dp", the scalar
// reductions over "dp" and "world": each op exactly once, each with time.
TEST(CommStatsGroupsTest, CollectivesAreRecordedUnderTheirGroup) {
  if (!HasBackend("gloo")) GTEST_SKIP() << "no Gloo in this build";
  const auto errors = testing::RunRanks(
      testing::LayoutOf(2, 1, 2), [](int rank, std::shared_ptr<ProcessGroups> groups) {
        CommStats* stats = groups->comm_stats();
        ASSERT_NE(stats, nullptr);
        EXPECT_EQ(groups->tp().comm_stats.get(), stats);
        EXPECT_EQ(groups->dp().comm_group, CommGroup::kDp);
        EXPECT_TRUE(stats->Take().empty());

        torch::Tensor x = torch::full({4, 8}, static_cast<float>(rank + 1));
        AllReduce(x, &groups->tp());
        (void)AllGather(x, 1, &groups->tp());
        (void)ReduceScatter(x, 1, &groups->tp());

        GradReducer reducer(groups->dp(), /*cuda=*/false, /*shard=*/true, {{0, 8}, {8, 16}});
        torch::Tensor grads = torch::ones({16});
        reducer.StartReduction(0, grads);
        reducer.StartReduction(1, grads);
        EXPECT_TRUE(reducer.WaitReductions().ok());
        reducer.StartGather(0, grads);
        reducer.StartGather(1, grads);
        EXPECT_TRUE(reducer.WaitGathers().ok());

        auto collectives = MakeCollectives(groups, 1 << 20);
        EXPECT_TRUE(collectives->AverageScalar(1.0).ok());
        EXPECT_TRUE(collectives->MaxScalarOverWorld(rank).ok());

        const Totals got = ByKey(stats->Take());
        const std::map<std::pair<std::string, std::string>, int64_t> want = {
            {{"all_reduce", "tp"}, 2},
            {{"all_gather", "tp"}, 1},
            {{"all_reduce", "dp"}, 3},
            {{"all_gather", "dp"}, 2},
            {{"all_reduce", "world"}, 1}};
        EXPECT_EQ(got.size(), want.size()) << "rank " << rank;
        for (const auto& [key, calls] : want) {
          auto it = got.find(key);
          ASSERT_NE(it, got.end()) << key.first << " " << key.second << " rank " << rank;
          EXPECT_EQ(it->second.calls, calls) << key.first << " " << key.second;
          EXPECT_GT(it->second.seconds, 0.0) << key.first << " " << key.second;
        }
      });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

}  // namespace
}  // namespace mt::parallel
