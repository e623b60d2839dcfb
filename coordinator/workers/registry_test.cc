#include "coordinator/workers/registry.h"

#include "common/base/clock.h"
#include "common/base/status_matchers.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

mt::v1::RegisterRequest Request(const std::string& node, int gpu, const std::string& id = "") {
  mt::v1::RegisterRequest r;
  r.set_worker_id(id);
  r.mutable_resources()->set_node(node);
  r.mutable_resources()->set_gpu_index(gpu);
  r.mutable_resources()->set_device_name(gpu < 0 ? "cpu" : "gpu");
  return r;
}

class RegistryTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  WorkerRegistry registry_{&clock_, absl::Seconds(10)};
};

TEST_F(RegistryTest, RegisterAssignsSequentialIdsAndIdleState) {
  MT_ASSERT_OK_AND_ASSIGN(auto a, registry_.Register(Request("n1", 0)));
  MT_ASSERT_OK_AND_ASSIGN(auto b, registry_.Register(Request("n1", 1)));
  EXPECT_EQ(a.id(), "w-1");
  EXPECT_EQ(b.id(), "w-2");
  EXPECT_EQ(a.state(), mt::v1::WORKER_STATE_IDLE);
  EXPECT_EQ(registry_.Counts().idle, 2);
}

TEST_F(RegistryTest, SilentWorkerIsLostAfterTimeoutAndMustReRegister) {
  MT_ASSERT_OK_AND_ASSIGN(auto a, registry_.Register(Request("n1", 0)));
  MT_ASSERT_OK_AND_ASSIGN(auto b, registry_.Register(Request("n1", 1)));
  clock_.Advance(absl::Seconds(6));
  MT_ASSERT_OK(registry_.Heartbeat(b.id()));
  clock_.Advance(absl::Seconds(5));  // a: 11 s silent, b: 5 s
  EXPECT_EQ(registry_.SweepLost(), std::vector<std::string>{"w-1"});
  MT_ASSERT_OK_AND_ASSIGN(auto lost, registry_.Get(a.id()));
  EXPECT_EQ(lost.state(), mt::v1::WORKER_STATE_LOST);
  EXPECT_THAT(lost.reason(), HasSubstr("no heartbeat for 11s"));
  EXPECT_THAT(registry_.Heartbeat(a.id()), StatusIs(absl::StatusCode::kNotFound, HasSubstr("w-1")));
  // Reconnecting with its id brings it back as the same worker.
  MT_ASSERT_OK_AND_ASSIGN(auto back, registry_.Register(Request("n1", 0, "w-1")));
  EXPECT_EQ(back.id(), "w-1");
  EXPECT_EQ(back.state(), mt::v1::WORKER_STATE_IDLE);
  EXPECT_EQ(registry_.Counts().total, 2);
  EXPECT_TRUE(registry_.SweepLost().empty());
}

TEST_F(RegistryTest, UnknownIdFromAnEarlierCoordinatorIsAdopted) {
  MT_ASSERT_OK_AND_ASSIGN(auto w, registry_.Register(Request("n1", 0, "w-7")));
  EXPECT_EQ(w.id(), "w-7");
  MT_ASSERT_OK_AND_ASSIGN(auto next, registry_.Register(Request("n1", 1)));
  EXPECT_EQ(next.id(), "w-8");
}

TEST_F(RegistryTest, BadInputIsRejectedAndNothingIsStored) {
  EXPECT_THAT(registry_.Register(Request("", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("resources.node")));
  EXPECT_THAT(registry_.Register(Request("bad node", 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("may hold only")));
  EXPECT_THAT(registry_.Register(Request("n", -2)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("resources.gpu_index")));
  EXPECT_THAT(registry_.Register(Request("n", 0, "x-1")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a worker id")));
  EXPECT_EQ(registry_.Counts().total, 0);
  EXPECT_THAT(registry_.Heartbeat("w-99"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(RegistryTest, DrainDeregisterAndFilters) {
  MT_ASSERT_OK_AND_ASSIGN(auto a, registry_.Register(Request("n1", 0)));
  MT_ASSERT_OK_AND_ASSIGN(auto b, registry_.Register(Request("n2", 0)));
  MT_ASSERT_OK_AND_ASSIGN(auto drained, registry_.Drain(a.id()));
  EXPECT_EQ(drained.state(), mt::v1::WORKER_STATE_DRAINING);
  // A draining worker that re-registers stays draining.
  MT_ASSERT_OK_AND_ASSIGN(auto again, registry_.Register(Request("n1", 0, a.id())));
  EXPECT_EQ(again.state(), mt::v1::WORKER_STATE_DRAINING);
  EXPECT_EQ(registry_.List({mt::v1::WORKER_STATE_IDLE}, "").size(), 1u);
  EXPECT_EQ(registry_.List({}, "n2").front().id(), b.id());
  MT_ASSERT_OK(registry_.Deregister(b.id()));
  EXPECT_THAT(registry_.Drain(b.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("WORKER_STATE_GONE")));
  EXPECT_EQ(registry_.Counts().gone, 1);
  EXPECT_TRUE(registry_.SweepLost().empty());  // GONE workers are never LOST
}

}  // namespace
}  // namespace mt::coordinator
