// WorkerMailboxes: order per worker, waiting and waking, forgetting a lost worker, shutdown.
#include "coordinator/workers/mailboxes.h"

#include <thread>

#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

mt::v1::WorkerCommand Stop(const std::string& job) {
  mt::v1::WorkerCommand c;
  c.mutable_stop()->set_job_id(job);
  return c;
}

TEST(WorkerMailboxesTest, TakesEverythingQueuedInOrder) {
  WorkerMailboxes boxes;
  boxes.Push("w-1", Stop("j-1"));
  boxes.Push("w-2", Stop("j-9"));
  boxes.Push("w-1", Stop("j-2"));
  auto got = boxes.Take("w-1", absl::ZeroDuration());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].stop().job_id(), "j-1");
  EXPECT_EQ(got[1].stop().job_id(), "j-2");
  EXPECT_TRUE(boxes.Take("w-1", absl::Milliseconds(5)).empty());
  EXPECT_EQ(boxes.Take("w-2", absl::ZeroDuration()).size(), 1u);
}

mt::v1::WorkerCommand Assign(const std::string& job, int attempt) {
  mt::v1::WorkerCommand c;
  c.mutable_assign()->set_job_id(job);
  c.mutable_assign()->set_attempt(attempt);
  return c;
}

TEST(WorkerMailboxesTest, AnAssignmentIsQueuedOnceButSentAgainOnceTaken) {
  WorkerMailboxes boxes;
  EXPECT_TRUE(boxes.PushAssignmentOnce("w-1", Assign("j-1", 0)));
  boxes.Push("w-1", Stop("j-2"));
  EXPECT_FALSE(boxes.PushAssignmentOnce("w-1", Assign("j-1", 0)));
  EXPECT_TRUE(boxes.PushAssignmentOnce("w-1", Assign("j-1", 1)));  // another attempt
  EXPECT_TRUE(boxes.PushAssignmentOnce("w-2", Assign("j-1", 0)));  // another worker
  auto got = boxes.Take("w-1", absl::ZeroDuration());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].assign().attempt(), 0);
  EXPECT_TRUE(got[1].has_stop());
  EXPECT_EQ(got[2].assign().attempt(), 1);
  // Taken (e.g. onto a stream that then broke): it can be sent again.
  EXPECT_TRUE(boxes.PushAssignmentOnce("w-1", Assign("j-1", 0)));
  EXPECT_EQ(boxes.Take("w-1", absl::ZeroDuration()).size(), 1u);
}

TEST(WorkerMailboxesTest, AWaitingTakeWakesOnPush) {
  WorkerMailboxes boxes;
  std::vector<mt::v1::WorkerCommand> got;
  std::thread taker([&] { got = boxes.Take("w-1", absl::Seconds(30)); });
  absl::SleepFor(absl::Milliseconds(10));
  boxes.Push("w-1", Stop("j-1"));
  taker.join();
  ASSERT_EQ(got.size(), 1u);
}

TEST(WorkerMailboxesTest, ForgetDropsALostWorkersCommands) {
  WorkerMailboxes boxes;
  boxes.Push("w-1", Stop("j-1"));
  boxes.Forget("w-1");
  EXPECT_TRUE(boxes.Take("w-1", absl::ZeroDuration()).empty());
}

TEST(WorkerMailboxesTest, ShutdownWakesWaiters) {
  WorkerMailboxes boxes;
  std::thread taker([&] { EXPECT_TRUE(boxes.Take("w-1", absl::Hours(1)).empty()); });
  absl::SleepFor(absl::Milliseconds(10));
  boxes.Shutdown();
  taker.join();
}

}  // namespace
}  // namespace mt::coordinator
