#include "coordinator/workers/registry.h"

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/base/status_matchers.h"
#include "coordinator/store/store.h"
#include "gtest/gtest.h"
#include "tests/testutil/subprocess.h"

namespace mt::coordinator {
namespace {

using ::mt::testing::IsOk;
using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

mt::v1::RegisterRequest Request(const std::string& node, int gpu, const std::string& id = "",
                                const std::string& credential = "",
                                const std::string& session = "") {
  mt::v1::RegisterRequest r;
  r.set_worker_id(id);
  r.set_worker_credential(credential);
  r.set_session(session);
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
  WorkerRegistry::Issued issued_a;
  MT_ASSERT_OK_AND_ASSIGN(auto a, registry_.Register(Request("n1", 0), &issued_a));
  MT_ASSERT_OK_AND_ASSIGN(auto b, registry_.Register(Request("n1", 1)));
  clock_.Advance(absl::Seconds(6));
  MT_ASSERT_OK(registry_.Heartbeat(b.id()));
  clock_.Advance(absl::Seconds(5));  // a: 11 s silent, b: 5 s
  EXPECT_EQ(registry_.SweepLost(), std::vector<std::string>{"w-1"});
  MT_ASSERT_OK_AND_ASSIGN(auto lost, registry_.Get(a.id()));
  EXPECT_EQ(lost.state(), mt::v1::WORKER_STATE_LOST);
  EXPECT_THAT(lost.reason(), HasSubstr("no heartbeat for 11s"));
  EXPECT_THAT(registry_.Heartbeat(a.id()), StatusIs(absl::StatusCode::kNotFound, HasSubstr("w-1")));
  // Reconnecting with its id and credential brings it back as the same worker.
  MT_ASSERT_OK_AND_ASSIGN(auto back,
                          registry_.Register(Request("n1", 0, "w-1", issued_a.credential)));
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
  WorkerRegistry::Issued issued_a;
  MT_ASSERT_OK_AND_ASSIGN(auto a, registry_.Register(Request("n1", 0), &issued_a));
  MT_ASSERT_OK_AND_ASSIGN(auto b, registry_.Register(Request("n2", 0)));
  MT_ASSERT_OK_AND_ASSIGN(auto drained, registry_.Drain(a.id()));
  EXPECT_EQ(drained.state(), mt::v1::WORKER_STATE_DRAINING);
  // A draining worker that re-registers (same daemon: its session) stays draining.
  MT_ASSERT_OK_AND_ASSIGN(auto again, registry_.Register(Request(
                                          "n1", 0, a.id(), issued_a.credential, issued_a.session)));
  EXPECT_EQ(again.state(), mt::v1::WORKER_STATE_DRAINING);
  EXPECT_EQ(registry_.List({mt::v1::WORKER_STATE_IDLE}, "").size(), 1u);
  EXPECT_EQ(registry_.List({}, "n2").front().id(), b.id());
  MT_ASSERT_OK(registry_.Deregister(b.id()));
  EXPECT_THAT(registry_.Drain(b.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("WORKER_STATE_GONE")));
  EXPECT_EQ(registry_.Counts().gone, 1);
  EXPECT_TRUE(registry_.SweepLost().empty());  // GONE workers are never LOST
}

TEST_F(RegistryTest, KnownIdNeedsItsCredential) {
  WorkerRegistry::Issued issued;
  MT_ASSERT_OK_AND_ASSIGN(auto w, registry_.Register(Request("n1", 0), &issued));
  EXPECT_EQ(issued.credential.size(), 64u);
  EXPECT_EQ(issued.session.size(), 64u);
  MT_ASSERT_OK(registry_.Assign(w.id(), "j-1", 0));
  clock_.Advance(absl::Seconds(60));  // silent: a restart would be accepted with the credential
  const std::string wrong(64, 'a');
  EXPECT_THAT(registry_.Register(Request("evil", 1, w.id())),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("worker w-1")));
  EXPECT_THAT(registry_.Register(Request("evil", 1, w.id(), wrong)),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("does not match")));
  EXPECT_THAT(registry_.Register(Request("evil", 1, w.id(), "short")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("worker_credential")));
  MT_ASSERT_OK_AND_ASSIGN(auto kept, registry_.Get(w.id()));
  EXPECT_EQ(kept.state(), mt::v1::WORKER_STATE_BUSY);
  EXPECT_EQ(kept.job_id(), "j-1");
  EXPECT_EQ(kept.resources().node(), "n1");
}

TEST_F(RegistryTest, CopiedStateFileCannotTakeOverALiveWorker) {
  WorkerRegistry::Issued first;
  MT_ASSERT_OK_AND_ASSIGN(auto w, registry_.Register(Request("n1", 0), &first));
  MT_ASSERT_OK(registry_.Assign(w.id(), "j-1", 0));
  clock_.Advance(absl::Seconds(4));
  MT_ASSERT_OK(registry_.Heartbeat(w.id()));
  // A second daemon with a copy of the state file: right credential, no session.
  EXPECT_THAT(registry_.Register(Request("copy", 1, w.id(), first.credential)),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("w-1 is connected from another daemon (WORKER_STATE_BUSY")));
  MT_ASSERT_OK_AND_ASSIGN(auto kept, registry_.Get(w.id()));
  EXPECT_EQ(kept.state(), mt::v1::WORKER_STATE_BUSY);
  EXPECT_EQ(kept.resources().node(), "n1");
  MT_ASSERT_OK(registry_.Authenticate(w.id(), first.session));
  // The same daemon reconnecting (its session) is accepted and gets a new session.
  WorkerRegistry::Issued again;
  MT_ASSERT_OK(registry_.Register(Request("n1", 0, w.id(), first.credential, first.session), &again)
                   .status());
  EXPECT_TRUE(again.credential.empty());  // issued once
  // The answer to that registration was lost: the daemon still holds the session before it.
  WorkerRegistry::Issued retried;
  MT_ASSERT_OK(
      registry_.Register(Request("n1", 0, w.id(), first.credential, first.session), &retried)
          .status());
  EXPECT_THAT(registry_.Register(Request("n1", 0, w.id(), first.credential, first.session)),
              StatusIs(absl::StatusCode::kAlreadyExists));  // two sessions back: no
  again = retried;
  EXPECT_THAT(registry_.Authenticate(w.id(), first.session),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("w-1")));
  MT_ASSERT_OK(registry_.Authenticate(w.id(), again.session));
  // A genuine restart (new process, no session) once the old one fell silent for lost_after.
  clock_.Advance(absl::Seconds(11));
  WorkerRegistry::Issued restarted;
  MT_ASSERT_OK_AND_ASSIGN(
      auto back, registry_.Register(Request("n1", 0, w.id(), first.credential), &restarted));
  EXPECT_EQ(back.id(), "w-1");
  EXPECT_THAT(registry_.Authenticate(w.id(), again.session),
              StatusIs(absl::StatusCode::kPermissionDenied));
  MT_ASSERT_OK(registry_.Authenticate(w.id(), restarted.session));
  EXPECT_THAT(registry_.Authenticate("w-5", restarted.session),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(RegistryTest, HugeCallerIdsDoNotWrapTheCounter) {
  EXPECT_THAT(registry_.Register(Request("n1", 0, "w-9223372036854775807")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a worker id")));
  EXPECT_THAT(registry_.Register(Request("n1", 0, "w-99999999999999999999")),
              StatusIs(absl::StatusCode::kInvalidArgument));
  MT_ASSERT_OK_AND_ASSIGN(auto next, registry_.Register(Request("n1", 0)));
  EXPECT_EQ(next.id(), "w-1");
  // The largest id is adopted; then ids run out with a clear error instead of wrapping.
  WorkerRegistry::Issued issued;
  MT_ASSERT_OK_AND_ASSIGN(auto top,
                          registry_.Register(Request("n1", 1, "w-1000000000000"), &issued));
  EXPECT_EQ(top.id(), "w-1000000000000");
  EXPECT_EQ(issued.credential.size(), 64u);  // adopted without one: a new one issued
  EXPECT_THAT(registry_.Register(Request("n1", 2)),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("every worker id")));
  EXPECT_EQ(registry_.Counts().total, 2);
}

TEST_F(RegistryTest, AdoptedIdsCountAgainstTheCap) {
  for (int i = 1; i <= WorkerRegistry::kMaxWorkers; ++i) {
    ASSERT_TRUE(registry_.Register(Request("n", 0, absl::StrCat("w-", 2 * i))).ok()) << i;
  }
  EXPECT_THAT(registry_.Register(Request("n", 0, "w-1")),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("100000 workers")));
  EXPECT_THAT(registry_.Register(Request("n", 0)), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(registry_.Counts().total, WorkerRegistry::kMaxWorkers);
}

// Worker ids and their credentials survive a coordinator restart (the store is reopened and a
// new registry reads it): the daemon proves its credential and keeps its id; a wrong credential
// is refused; a new worker never gets an id issued before the restart.
TEST(RegistryPersistTest, IdentitiesSurviveACoordinatorRestart) {
  const std::string dir = testutil::MakeTempDir("registry_persist");
  FakeClock clock;
  WorkerRegistry::Issued first;
  {
    MT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(dir));
    WorkerRegistry before(&clock, absl::Seconds(10));
    MT_ASSERT_OK(before.Persist(store.get()));
    MT_ASSERT_OK_AND_ASSIGN(auto a, before.Register(Request("n1", 0), &first));
    ASSERT_EQ(a.id(), "w-1");
    MT_ASSERT_OK(before.Register(Request("n1", 1)).status());  // w-2
  }
  MT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, Store::Open(dir));
  WorkerRegistry after(&clock, absl::Seconds(10));
  MT_ASSERT_OK(after.Persist(store.get()));
  // Known but not registered since the restart: its calls are answered "register".
  EXPECT_THAT(after.Authenticate("w-1", first.session), StatusIs(absl::StatusCode::kNotFound));
  const std::string wrong(64, 'a');
  EXPECT_THAT(after.Register(Request("n1", 0, "w-1", wrong)),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("w-1")));
  EXPECT_THAT(after.Register(Request("n1", 0, "w-1")),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("w-1")));
  WorkerRegistry::Issued again;
  MT_ASSERT_OK_AND_ASSIGN(auto back,
                          after.Register(Request("n1", 0, "w-1", first.credential), &again));
  EXPECT_EQ(back.id(), "w-1");
  EXPECT_TRUE(again.credential.empty());  // the one it holds stays valid
  MT_ASSERT_OK(after.Authenticate("w-1", again.session));
  MT_ASSERT_OK_AND_ASSIGN(auto fresh, after.Register(Request("n2", 0)));
  EXPECT_EQ(fresh.id(), "w-3");
}

}  // namespace
}  // namespace mt::coordinator
