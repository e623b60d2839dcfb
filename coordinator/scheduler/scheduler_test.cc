// Scheduler: the placement pass through a FakeWorkerPool and a recording PlacementTarget.
// Ordering (priority, then FIFO), gang placement (all ranks or none), the blocking rule, the
// capacity-version skip, and queue positions.
#include "coordinator/scheduler/scheduler.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spec/yaml_spec.h"
#include "coordinator/scheduler/fake_worker_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

mt::v1::JobSpec Spec(int dp, int priority, int heads = 2) {
  auto parsed = spec::ParseYamlSpec(
      absl::StrCat("name: s\n"
                   "priority: ",
                   priority,
                   "\n"
                   "model: {num_layers: 2, hidden_size: 32, num_attention_heads: ",
                   heads,
                   ", seq_length: 16}\n"
                   "parallel: {tp: 1, pp: 1, dp: ",
                   dp,
                   "}\n"
                   "training: {micro_batch_size: 1, train_iters: 10, lr: 1.0e-3}\n"
                   "data:\n  data_path: /data/x\n"
                   "  tokenizer: {vocab_file: /v.json, merge_file: /m.txt}\n"));
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed->spec;
}

// Records what the pass decided and keeps the scheduler's queue in step, as JobManager does.
class RecordingTarget : public PlacementTarget {
 public:
  explicit RecordingTarget(Scheduler* scheduler) : scheduler_(scheduler) {}

  int64_t Add(const mt::v1::JobSpec& spec) {
    const int64_t id = static_cast<int64_t>(jobs_.size()) + 1;
    mt::v1::Job& job = jobs_[id];
    job.set_id(absl::StrCat("j-", id));
    *job.mutable_spec() = spec;
    scheduler_->Enqueue({spec.priority(), id});
    return id;
  }

  const mt::v1::Job& PendingJob(int64_t id) override {
    ++reads_;
    return jobs_.at(id);
  }
  void OnUnplannable(int64_t id, const absl::Status& error) override {
    unplannable_.push_back(id);
    scheduler_->Dequeue(Key(id));
  }
  void OnWaiting(int64_t id, const std::string& reason) override {
    waiting_.push_back(id);
    reasons_[id] = reason;
  }
  absl::Status OnPlaced(int64_t id, const mt::v1::PlanJobResponse& plan) override {
    if (refuse_placement_) return absl::InternalError("store write failed");
    placed_.push_back(id);
    for (const auto& p : plan.placement()) workers_[id].push_back(p.worker_id());
    scheduler_->Dequeue(Key(id));
    return absl::OkStatus();
  }

  QueueKey Key(int64_t id) const { return {jobs_.at(id).spec().priority(), id}; }

  Scheduler* scheduler_;
  std::map<int64_t, mt::v1::Job> jobs_;
  int reads_ = 0;
  bool refuse_placement_ = false;
  std::vector<int64_t> placed_, waiting_, unplannable_;
  std::map<int64_t, std::vector<std::string>> workers_;
  std::map<int64_t, std::string> reasons_;
};

class SchedulerTest : public ::testing::Test {
 protected:
  FakeWorkerPool pool_;
  Scheduler scheduler_{&pool_};
  RecordingTarget target_{&scheduler_};
};

TEST_F(SchedulerTest, PlacesByPriorityThenFifo) {
  for (int i = 0; i < 3; ++i) pool_.AddWorker();
  const int64_t low1 = target_.Add(Spec(1, 0));
  const int64_t high = target_.Add(Spec(1, 5));
  const int64_t low2 = target_.Add(Spec(1, 0));
  const int64_t low3 = target_.Add(Spec(1, 0));
  scheduler_.Pass(&target_);
  EXPECT_THAT(target_.placed_, ElementsAre(high, low1, low2));
  EXPECT_THAT(target_.waiting_, ElementsAre(low3));
  EXPECT_EQ(scheduler_.queued(), 1);
}

TEST_F(SchedulerTest, PlacesEveryRankOfAJobOnDistinctWorkers) {
  for (int i = 0; i < 4; ++i) pool_.AddWorker();
  const int64_t id = target_.Add(Spec(4, 0));
  scheduler_.Pass(&target_);
  ASSERT_THAT(target_.placed_, ElementsAre(id));
  EXPECT_THAT(target_.workers_[id], ElementsAre("w-1", "w-2", "w-3", "w-4"));
  for (const auto& w : target_.workers_[id]) EXPECT_EQ(pool_.JobOf(w), "j-1");
}

TEST_F(SchedulerTest, AJobThatFitsTheClusterBlocksTheJobsBehindIt) {
  pool_.AddWorker();
  pool_.AddWorker();
  pool_.set_extra_live(2);  // 4 live, 2 free
  const int64_t big = target_.Add(Spec(4, 0));
  target_.Add(Spec(1, 0));
  scheduler_.Pass(&target_);
  EXPECT_THAT(target_.placed_, IsEmpty());
  EXPECT_THAT(target_.waiting_, ElementsAre(big));
  EXPECT_THAT(target_.reasons_[big], HasSubstr("waiting for 4 free workers (2 free)"));
}

TEST_F(SchedulerTest, AJobLargerThanTheClusterLetsSmallerJobsBy) {
  pool_.AddWorker();
  pool_.AddWorker();
  const int64_t huge = target_.Add(Spec(8, 9));
  const int64_t small = target_.Add(Spec(2, 0));
  scheduler_.Pass(&target_);
  EXPECT_THAT(target_.waiting_, ElementsAre(huge));
  EXPECT_THAT(target_.placed_, ElementsAre(small));
}

TEST_F(SchedulerTest, ABlockedQueueIsNotPlannedAgainAtTheSameCapacity) {
  pool_.AddWorker();
  pool_.set_extra_live(3);
  const int64_t blocked = target_.Add(Spec(4, 0));
  for (int i = 0; i < 100; ++i) target_.Add(Spec(1, 0));
  scheduler_.Pass(&target_);
  EXPECT_EQ(target_.reads_, 1);
  const int snapshots = pool_.snapshots();
  for (int i = 0; i < 10; ++i) scheduler_.Pass(&target_);
  EXPECT_EQ(target_.reads_, 1) << "the blocked head was planned again";
  EXPECT_EQ(pool_.snapshots(), snapshots);
  EXPECT_THAT(target_.waiting_, ElementsAre(blocked));
  // New capacity: the head is planned again (and still blocks with 2 of 4 free).
  pool_.AddWorker();
  scheduler_.Pass(&target_);
  EXPECT_EQ(target_.reads_, 2);
  EXPECT_THAT(target_.waiting_, ElementsAre(blocked, blocked));
}

TEST_F(SchedulerTest, ANonBlockingJobIsSkippedAtTheSameCapacity) {
  pool_.AddWorker();
  const int64_t huge = target_.Add(Spec(8, 0));
  scheduler_.Pass(&target_);
  scheduler_.Pass(&target_);
  EXPECT_EQ(target_.reads_, 1);
  EXPECT_THAT(target_.waiting_, ElementsAre(huge));
  // A job queued behind it is still planned (and placed).
  const int64_t small = target_.Add(Spec(1, 0));
  scheduler_.Pass(&target_);
  EXPECT_THAT(target_.placed_, ElementsAre(small));
}

TEST_F(SchedulerTest, AGangIsPlacedWholeOrNotAtAll) {
  const std::string w1 = pool_.AddWorker();
  const std::string w2 = pool_.AddWorker();
  pool_.RefuseAssign(w2);  // lost to another claimant between snapshot and claim
  const int64_t id = target_.Add(Spec(2, 0));
  scheduler_.Pass(&target_);
  EXPECT_THAT(target_.placed_, IsEmpty());
  EXPECT_EQ(pool_.JobOf(w1), "") << "the first worker was not given back";
  EXPECT_EQ(scheduler_.QueuePosition(target_.Key(id)), 0);
  EXPECT_EQ(scheduler_.queued(), 1);
}

TEST_F(SchedulerTest, APlacementTheOwnerCannotRecordGivesTheWorkersBack) {
  const std::string w1 = pool_.AddWorker();
  target_.Add(Spec(1, 0));
  target_.refuse_placement_ = true;
  scheduler_.Pass(&target_);
  EXPECT_EQ(pool_.JobOf(w1), "");
  EXPECT_EQ(scheduler_.queued(), 1);
  target_.refuse_placement_ = false;
  scheduler_.Pass(&target_);
  EXPECT_EQ(pool_.JobOf(w1), "j-1");
  EXPECT_EQ(scheduler_.queued(), 0);
}

TEST_F(SchedulerTest, AnUnplannableJobLeavesTheQueueAndOthersGoOn) {
  pool_.AddWorker();
  const int64_t bad = target_.Add(Spec(1, 0, /*heads=*/3));  // 32 hidden / 3 heads
  const int64_t good = target_.Add(Spec(1, 0));
  scheduler_.Pass(&target_);
  EXPECT_THAT(target_.unplannable_, ElementsAre(bad));
  EXPECT_THAT(target_.placed_, ElementsAre(good));
}

TEST_F(SchedulerTest, QueuePositionsFollowSchedulingOrder) {
  const int64_t a = target_.Add(Spec(1, 0));
  const int64_t b = target_.Add(Spec(1, 3));
  const int64_t c = target_.Add(Spec(1, 0));
  const int64_t d = target_.Add(Spec(1, 3));
  EXPECT_EQ(scheduler_.QueuePosition(target_.Key(b)), 0);
  EXPECT_EQ(scheduler_.QueuePosition(target_.Key(d)), 1);
  EXPECT_EQ(scheduler_.QueuePosition(target_.Key(a)), 2);
  EXPECT_EQ(scheduler_.QueuePosition(target_.Key(c)), 3);
  scheduler_.Dequeue(target_.Key(b));
  EXPECT_EQ(scheduler_.QueuePosition(target_.Key(d)), 0);
  EXPECT_EQ(scheduler_.QueuePosition(target_.Key(c)), 2);
}

}  // namespace
}  // namespace mt::coordinator
