// PendingQueue: scheduling order, walking by key while the queue changes, positions.
#include "coordinator/scheduler/pending_queue.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using ::testing::ElementsAre;

std::vector<int64_t> Walk(const PendingQueue& q) {
  std::vector<int64_t> ids;
  for (auto k = q.Next(std::nullopt); k.has_value(); k = q.Next(k)) ids.push_back(k->id);
  return ids;
}

TEST(PendingQueueTest, OrdersByPriorityThenId) {
  PendingQueue q;
  q.Add({0, 1});
  q.Add({2, 4});
  q.Add({0, 3});
  q.Add({2, 2});
  q.Add({-1, 0});
  EXPECT_THAT(Walk(q), ElementsAre(2, 4, 1, 3, 0));
  EXPECT_EQ(q.size(), 5);
}

TEST(PendingQueueTest, AJobQueuedAgainGoesBackToItsPlace) {
  PendingQueue q;
  q.Add({0, 1});
  q.Add({0, 5});
  q.Add({0, 3});  // a restart of an older job
  q.Add({0, 3});  // twice is once
  EXPECT_THAT(Walk(q), ElementsAre(1, 3, 5));
  EXPECT_EQ(q.size(), 3);
}

TEST(PendingQueueTest, NextWorksFromAKeyThatLeft) {
  PendingQueue q;
  for (int64_t id : {1, 2, 3}) q.Add({0, id});
  q.Add({1, 9});
  q.Remove({0, 2});
  q.Remove({1, 9});
  EXPECT_EQ(q.Next(QueueKey{0, 2})->id, 3);
  EXPECT_EQ(q.Next(QueueKey{1, 9})->id, 1);
  EXPECT_FALSE(q.Next(QueueKey{0, 3}).has_value());
  q.Remove({0, 7});  // not queued: no-op
  EXPECT_EQ(q.size(), 2);
}

TEST(PendingQueueTest, PositionsCountTheJobsAhead) {
  PendingQueue q;
  q.Add({0, 1});
  q.Add({5, 2});
  q.Add({0, 3});
  q.Add({5, 4});
  EXPECT_EQ(q.Position({5, 2}), 0);
  EXPECT_EQ(q.Position({5, 4}), 1);
  EXPECT_EQ(q.Position({0, 1}), 2);
  EXPECT_EQ(q.Position({0, 3}), 3);
}

}  // namespace
}  // namespace mt::coordinator
