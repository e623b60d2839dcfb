#include "worker/daemon/state_file.h"

#include "common/base/status_matchers.h"
#include "gtest/gtest.h"

namespace mt::worker {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

TEST(WorkerStateFileTest, RoundTripsIdAndCredential) {
  const WorkerState s{"w-12", std::string(64, 'a')};
  const std::string text = FormatWorkerState(s);
  EXPECT_EQ(text, "mt-worker-state 1\nworker_id w-12\ncredential " + std::string(64, 'a') + "\n");
  MT_ASSERT_OK_AND_ASSIGN(WorkerState back, ParseWorkerState(text));
  EXPECT_EQ(back.worker_id, "w-12");
  EXPECT_EQ(back.credential, s.credential);
}

TEST(WorkerStateFileTest, BareIdOfAnOlderDaemonHasNoCredential) {
  MT_ASSERT_OK_AND_ASSIGN(WorkerState s, ParseWorkerState("w-3\n"));
  EXPECT_EQ(s.worker_id, "w-3");
  EXPECT_EQ(s.credential, "");
}

TEST(WorkerStateFileTest, DamagedFilesNameTheLine) {
  EXPECT_THAT(ParseWorkerState("mt-worker-state 2\nworker_id w-1\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 1")));
  EXPECT_THAT(
      ParseWorkerState("mt-worker-state 1\nworker_id w-1\nshoe 3\n"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 3: unknown key 'shoe'")));
  EXPECT_THAT(ParseWorkerState("mt-worker-state 1\ncredential ab\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no worker_id")));
}

}  // namespace
}  // namespace mt::worker
