// RendezvousStore: bounds, Set/Get/Add within one (job, attempt), attempts kept apart, waiters
// woken by a later Set or by Shutdown, timeouts (short real durations: the store waits on its
// mutex, which has no clock to fake).
#include "coordinator/rendezvous/rendezvous_store.h"

#include <string>
#include <thread>
#include <vector>

#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using ::mt::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(RendezvousStoreTest, RejectsKeysAndValuesOutOfBounds) {
  RendezvousStore store;
  EXPECT_THAT(store.Set("j-1", 0, "", "v"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store.Set("j-1", 0, std::string(RendezvousStore::kMaxKeyBytes + 1, 'k'), "v"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key must be")));
  EXPECT_THAT(store.Set("j-1", 0, "k", std::string(RendezvousStore::kMaxValueBytes + 1, 'v')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("value must be")));
  EXPECT_THAT(store.Get("j-1", 0, {}, absl::ZeroDuration()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1..4096")));
  EXPECT_THAT(store.Add("j-1", 0, "", 1).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(RendezvousStoreTest, SetThenGetReturnsValuesInKeyOrder) {
  RendezvousStore store;
  ASSERT_TRUE(store.Set("j-1", 0, "a", "1").ok());
  ASSERT_TRUE(store.Set("j-1", 0, "b", "2").ok());
  ASSERT_TRUE(store.Set("j-1", 0, "a", "3").ok());  // replaces
  auto values = store.Get("j-1", 0, {"b", "a"}, absl::Seconds(1));
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre("2", "3"));
}

TEST(RendezvousStoreTest, GetTimesOutNamingTheMissingKeys) {
  RendezvousStore store;
  ASSERT_TRUE(store.Set("j-1", 0, "a", "1").ok());
  EXPECT_THAT(store.Get("j-1", 0, {"a", "b", "c"}, absl::Milliseconds(20)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("missing after 20ms: b, c")));
}

TEST(RendezvousStoreTest, AttemptsAndJobsAreIsolated) {
  RendezvousStore store;
  ASSERT_TRUE(store.Set("j-1", 0, "addr", "old").ok());
  EXPECT_THAT(store.Get("j-1", 1, {"addr"}, absl::Milliseconds(10)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(store.Get("j-2", 0, {"addr"}, absl::Milliseconds(10)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_TRUE(store.Set("j-1", 1, "addr", "new").ok());
  EXPECT_THAT(*store.Get("j-1", 0, {"addr"}, absl::Seconds(1)), ElementsAre("old"));
  EXPECT_THAT(*store.Get("j-1", 1, {"addr"}, absl::Seconds(1)), ElementsAre("new"));
  store.Drop("j-1", 0);
  EXPECT_THAT(store.Get("j-1", 0, {"addr"}, absl::Milliseconds(10)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(*store.Get("j-1", 1, {"addr"}, absl::Seconds(1)), ElementsAre("new"));
}

TEST(RendezvousStoreTest, AddCountsAndRefusesNonIntegers) {
  RendezvousStore store;
  EXPECT_EQ(*store.Add("j-1", 0, "n", 1), 1);
  EXPECT_EQ(*store.Add("j-1", 0, "n", 5), 6);
  EXPECT_EQ(*store.Add("j-1", 0, "n", -2), 4);
  EXPECT_THAT(*store.Get("j-1", 0, {"n"}, absl::Seconds(1)), ElementsAre("4"));
  ASSERT_TRUE(store.Set("j-1", 0, "s", "text").ok());
  EXPECT_THAT(store.Add("j-1", 0, "s", 1).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("integer")));
}

TEST(RendezvousStoreTest, ConcurrentWaitersWakeWhenTheirKeysArrive) {
  RendezvousStore store;
  constexpr int kWaiters = 8;
  std::vector<absl::StatusOr<std::vector<std::string>>> got(kWaiters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      got[i] = store.Get("j-1", 0, {"master", "rank" + std::to_string(i)}, absl::Seconds(30));
    });
  }
  // Every rank adds itself to a counter and publishes its key; the waiters need all of them.
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_TRUE(store.Add("j-1", 0, "arrived", 1).ok());
    ASSERT_TRUE(store.Set("j-1", 0, "rank" + std::to_string(i), std::to_string(i)).ok());
  }
  ASSERT_TRUE(store.Set("j-1", 0, "master", "host:1234").ok());
  for (auto& t : threads) t.join();
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status();
    EXPECT_THAT(*got[i], ElementsAre("host:1234", std::to_string(i)));
  }
  EXPECT_EQ(*store.Add("j-1", 0, "arrived", 0), kWaiters);
}

TEST(RendezvousStoreTest, ShutdownWakesWaitersAtOnce) {
  RendezvousStore store;
  absl::StatusOr<std::vector<std::string>> got;
  std::thread waiter([&] { got = store.Get("j-1", 0, {"never"}, absl::Hours(1)); });
  absl::SleepFor(absl::Milliseconds(20));
  store.Shutdown();
  waiter.join();
  EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("never")));
  const absl::Time start = absl::Now();
  EXPECT_FALSE(store.Get("j-1", 0, {"never"}, absl::Hours(1)).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace mt::coordinator
