// HangDetector on a FakeClock: the floor, k x p99, the save/load timeout, rebasing, ended
// ranks, who is blamed, and the step times derived from beacons.
#include "coordinator/jobs/hang_detector.h"

#include "common/base/clock.h"
#include "gtest/gtest.h"

namespace mt::coordinator {
namespace {

using mt::v1::RANK_ACTIVITY_BACKWARD;
using mt::v1::RANK_ACTIVITY_COLLECTIVE;
using mt::v1::RANK_ACTIVITY_DATA;
using mt::v1::RANK_ACTIVITY_FORWARD;
using mt::v1::RANK_ACTIVITY_LOAD;
using mt::v1::RANK_ACTIVITY_OPTIMIZER;
using mt::v1::RANK_ACTIVITY_SAVE;

HangConfig Config(int floor_s = 10, double k = 10, int save_load_s = 100) {
  HangConfig c;
  c.floor = absl::Seconds(floor_s);
  c.step_multiplier = k;
  c.save_load_timeout = absl::Seconds(save_load_s);
  return c;
}

class HangDetectorTest : public ::testing::Test {
 protected:
  FakeClock clock_;
};

TEST_F(HangDetectorTest, ConfigComesFromTheSpec) {
  mt::v1::RestartPolicy r;
  r.set_hang_timeout_floor_seconds(7);
  r.set_hang_step_multiplier(3.5);
  r.set_save_load_timeout_seconds(90);
  const HangConfig c = HangConfig::FromSpec(r);
  EXPECT_EQ(c.floor, absl::Seconds(7));
  EXPECT_EQ(c.step_multiplier, 3.5);
  EXPECT_EQ(c.save_load_timeout, absl::Seconds(90));
}

TEST_F(HangDetectorTest, ActivityNames) {
  EXPECT_EQ(ActivityName(RANK_ACTIVITY_DATA), "data");
  EXPECT_EQ(ActivityName(RANK_ACTIVITY_FORWARD), "forward");
  EXPECT_EQ(ActivityName(RANK_ACTIVITY_BACKWARD), "backward");
  EXPECT_EQ(ActivityName(RANK_ACTIVITY_OPTIMIZER), "optimizer");
  EXPECT_EQ(ActivityName(RANK_ACTIVITY_COLLECTIVE), "collective");
  EXPECT_EQ(ActivityName(RANK_ACTIVITY_SAVE), "save");
  EXPECT_EQ(ActivityName(RANK_ACTIVITY_LOAD), "load");
  EXPECT_EQ(ActivityName(mt::v1::RANK_ACTIVITY_EVAL), "eval");
  EXPECT_EQ(ActivityName(mt::v1::RANK_ACTIVITY_UNSPECIFIED), "unknown");
  EXPECT_EQ(ActivityName(static_cast<mt::v1::RankActivity>(99)), "unknown");
}

TEST_F(HangDetectorTest, WithoutStepTimesTheFloorIsTheTimeout) {
  HangDetector d(2, Config(10), clock_.Now());
  EXPECT_EQ(d.P99StepTime(), absl::ZeroDuration());
  EXPECT_EQ(d.Timeout(), absl::Seconds(10));
  clock_.Advance(absl::Seconds(9));
  EXPECT_FALSE(d.Hung(clock_.Now()).has_value());
  clock_.Advance(absl::Seconds(1));
  auto hung = d.Hung(clock_.Now());
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->rank, 0);  // nobody ever reported: the lowest rank
  EXPECT_EQ(hung->activity, mt::v1::RANK_ACTIVITY_UNSPECIFIED);
  EXPECT_EQ(hung->step, 0);
  EXPECT_EQ(hung->stalled_for, absl::Seconds(10));
  EXPECT_EQ(hung->timeout, absl::Seconds(10));
}

TEST_F(HangDetectorTest, BeaconsAreProgress) {
  HangDetector d(2, Config(10), clock_.Now());
  for (int i = 1; i <= 5; ++i) {
    clock_.Advance(absl::Seconds(6));
    d.OnBeacon(0, RANK_ACTIVITY_FORWARD, i, clock_.Now());
    d.OnBeacon(1, RANK_ACTIVITY_FORWARD, i, clock_.Now());
    EXPECT_FALSE(d.Hung(clock_.Now()).has_value()) << i;
  }
}

TEST_F(HangDetectorTest, StepTimesComeFromStepChangesAndTheP99UsesNearestRank) {
  HangDetector d(1, Config(1, 10), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_FORWARD, 1, clock_.Now());  // the first step: no time yet
  EXPECT_EQ(d.P99StepTime(), absl::ZeroDuration());
  // 99 steps of 1 s then one of 5 s: the p99 of 100 values is the 99th, 1 s.
  for (int i = 2; i <= 100; ++i) {
    clock_.Advance(absl::Seconds(1));
    d.OnBeacon(0, RANK_ACTIVITY_DATA, i, clock_.Now());
  }
  clock_.Advance(absl::Seconds(5));
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 101, clock_.Now());
  EXPECT_EQ(d.P99StepTime(), absl::Seconds(1));
  EXPECT_EQ(d.Timeout(), absl::Seconds(10));  // 10 x 1 s > the 1 s floor
  // One more slow step: 2 of 101 values are 5 s, the p99 (the 100th) is 5 s.
  clock_.Advance(absl::Seconds(5));
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 102, clock_.Now());
  EXPECT_EQ(d.P99StepTime(), absl::Seconds(5));
  EXPECT_EQ(d.Timeout(), absl::Seconds(50));
}

TEST_F(HangDetectorTest, ActivityChangesWithinAStepAreProgressButNotStepTimes) {
  HangDetector d(1, Config(10), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_FORWARD, 1, clock_.Now());
  clock_.Advance(absl::Seconds(8));
  d.OnBeacon(0, RANK_ACTIVITY_BACKWARD, 1, clock_.Now());
  clock_.Advance(absl::Seconds(8));
  d.OnBeacon(0, RANK_ACTIVITY_OPTIMIZER, 1, clock_.Now());
  EXPECT_FALSE(d.Hung(clock_.Now()).has_value());
  EXPECT_EQ(d.P99StepTime(), absl::ZeroDuration());
  clock_.Advance(absl::Seconds(4));
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 2, clock_.Now());
  EXPECT_EQ(d.P99StepTime(), absl::Seconds(20));
}

TEST_F(HangDetectorTest, AJumpOfSeveralStepsCountsPerStep) {
  HangDetector d(1, Config(1, 2), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 10, clock_.Now());
  clock_.Advance(absl::Seconds(3));
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 16, clock_.Now());  // coalesced: 6 steps in 3 s
  EXPECT_EQ(d.P99StepTime(), absl::Milliseconds(500));
  EXPECT_EQ(d.Timeout(), absl::Seconds(1));  // 2 x 0.5 s = the floor
}

TEST_F(HangDetectorTest, TheStepWindowForgetsOldSteps) {
  HangDetector d(1, Config(1, 1), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 1, clock_.Now());
  clock_.Advance(absl::Seconds(100));
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 2, clock_.Now());
  EXPECT_EQ(d.P99StepTime(), absl::Seconds(100));
  for (int i = 3; i < 3 + HangDetector::kStepWindow; ++i) {
    clock_.Advance(absl::Seconds(2));
    d.OnBeacon(0, RANK_ACTIVITY_DATA, i, clock_.Now());
  }
  EXPECT_EQ(d.P99StepTime(), absl::Seconds(2));
}

TEST_F(HangDetectorTest, SaveAndLoadGetTheirOwnTimeoutForTheWholeJob) {
  HangDetector d(2, Config(10, 10, 100), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_SAVE, 20, clock_.Now());
  d.OnBeacon(1, RANK_ACTIVITY_OPTIMIZER, 20, clock_.Now());  // waits for rank 0's save
  EXPECT_EQ(d.Timeout(), absl::Seconds(100));
  clock_.Advance(absl::Seconds(99));
  EXPECT_FALSE(d.Hung(clock_.Now()).has_value());
  clock_.Advance(absl::Seconds(1));
  auto hung = d.Hung(clock_.Now());
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->timeout, absl::Seconds(100));
  // Both stalled as long; the one at the earlier activity of step 20 (optimizer before save).
  EXPECT_EQ(hung->rank, 1);
  d.OnBeacon(0, RANK_ACTIVITY_LOAD, 0, clock_.Now());
  EXPECT_EQ(d.Timeout(), absl::Seconds(100));
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 21, clock_.Now());
  EXPECT_EQ(d.Timeout(), absl::Seconds(10));
  // The 100 s of step 20 held a save: no step time.
  EXPECT_EQ(d.P99StepTime(), absl::ZeroDuration());
}

TEST_F(HangDetectorTest, StepsWithAnEvaluationAreNoStepTimes) {
  HangDetector d(1, Config(1, 10), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 1, clock_.Now());
  clock_.Advance(absl::Seconds(1));
  d.OnBeacon(0, mt::v1::RANK_ACTIVITY_EVAL, 1, clock_.Now());
  clock_.Advance(absl::Seconds(60));
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 2, clock_.Now());
  EXPECT_EQ(d.P99StepTime(), absl::ZeroDuration());
  clock_.Advance(absl::Seconds(2));
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 3, clock_.Now());
  EXPECT_EQ(d.P99StepTime(), absl::Seconds(2));
}

TEST_F(HangDetectorTest, ASaveLoadTimeoutBelowTheFloorIsTheFloor) {
  HangDetector d(1, Config(50, 10, 20), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_SAVE, 1, clock_.Now());
  EXPECT_EQ(d.Timeout(), absl::Seconds(50));
}

TEST_F(HangDetectorTest, TheStoppedRankIsBlamedNotTheOneWaitingForIt) {
  // Rank 1 stops in the forward pass of step 31; rank 0 goes on to the optimizer of step 31
  // (the DP reduction, where it waits) a little later, so it is stalled for less time.
  HangDetector d(2, Config(5), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_FORWARD, 31, clock_.Now());
  d.OnBeacon(1, RANK_ACTIVITY_FORWARD, 31, clock_.Now());
  clock_.Advance(absl::Milliseconds(300));
  d.OnBeacon(0, RANK_ACTIVITY_OPTIMIZER, 31, clock_.Now());
  clock_.Advance(absl::Milliseconds(4700));
  auto hung = d.Hung(clock_.Now());
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->rank, 1);
  EXPECT_EQ(hung->activity, RANK_ACTIVITY_FORWARD);
  EXPECT_EQ(hung->step, 31);
  EXPECT_EQ(hung->stalled_for, absl::Seconds(5));
}

TEST_F(HangDetectorTest, TheRankBehindIsBlamedEvenWhenItsBeaconCameLater) {
  // Rank 1 sent its last beacon (step 30's optimizer) after rank 0 reached step 31's
  // optimizer: rank 0 crosses the timeout first, but rank 1 is behind.
  HangDetector d(2, Config(10), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_OPTIMIZER, 31, clock_.Now());
  clock_.Advance(absl::Milliseconds(200));
  d.OnBeacon(1, RANK_ACTIVITY_OPTIMIZER, 30, clock_.Now());
  clock_.Advance(absl::Milliseconds(9800));
  auto hung = d.Hung(clock_.Now());
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->rank, 1);
  EXPECT_EQ(hung->step, 30);
}

TEST_F(HangDetectorTest, WithinAStepARankInACollectiveIsBlamedLast) {
  // Rank 0 waits in the stop vote after step 6 (labelled 6) for ranks 1 and 2, still saving
  // step 6 (SAVE comes after COLLECTIVE in the proto's order: the flag decides).
  HangDetector d(3, Config(10), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_COLLECTIVE, 6, clock_.Now());
  d.OnBeacon(1, RANK_ACTIVITY_SAVE, 6, clock_.Now());
  d.OnBeacon(2, RANK_ACTIVITY_SAVE, 6, clock_.Now());
  clock_.Advance(absl::Seconds(100));  // the save/load timeout
  auto hung = d.Hung(clock_.Now());
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->rank, 1);  // ties on step and activity: the lowest rank
}

// What CI saw (HangJobsTest): rank 1 entered the stop vote after step 12 and was SIGSTOPped
// before it took rank 0's data; rank 0 left the vote and waits in step 13's gradient
// reduction, with an older beacon. Rank 1 is behind, though in a collective.
TEST_F(HangDetectorTest, ARankStuckInACollectiveTheOthersLeftIsBlamed) {
  HangDetector d(2, Config(10), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_OPTIMIZER, 13, clock_.Now());
  clock_.Advance(absl::Milliseconds(150));
  d.OnBeacon(1, RANK_ACTIVITY_COLLECTIVE, 12, clock_.Now());
  clock_.Advance(absl::Milliseconds(9850));
  auto hung = d.Hung(clock_.Now());
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->rank, 1);
  EXPECT_EQ(hung->activity, RANK_ACTIVITY_COLLECTIVE);
  EXPECT_EQ(hung->step, 12);
  // The display threshold names the same rank.
  auto shown = d.Stalled(clock_.Now(), absl::Seconds(5));
  ASSERT_TRUE(shown.has_value());
  EXPECT_EQ(shown->rank, 1);
}

TEST_F(HangDetectorTest, ARankThatMovedRecentlyIsNoSuspect) {
  HangDetector d(2, Config(10), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 50, clock_.Now());
  clock_.Advance(absl::Seconds(6));
  d.OnBeacon(1, RANK_ACTIVITY_DATA, 3, clock_.Now());  // far behind but moving
  clock_.Advance(absl::Seconds(4));
  auto hung = d.Hung(clock_.Now());
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->rank, 0);
}

TEST_F(HangDetectorTest, RebaseStartsStallsAtRunning) {
  HangDetector d(2, Config(10), clock_.Now());
  clock_.Advance(absl::Minutes(5));  // loading, joining the rendezvous
  d.Rebase(clock_.Now());
  clock_.Advance(absl::Seconds(9));
  EXPECT_FALSE(d.Hung(clock_.Now()).has_value());
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(d.Hung(clock_.Now()).has_value());
}

TEST_F(HangDetectorTest, EndedRanksAreNotWatched) {
  HangDetector d(2, Config(10), clock_.Now());
  d.OnRankEnded(1);
  d.OnRankEnded(7);                                    // out of range: ignored
  d.OnBeacon(1, RANK_ACTIVITY_SAVE, 3, clock_.Now());  // after its end: ignored
  EXPECT_EQ(d.Timeout(), absl::Seconds(10));
  clock_.Advance(absl::Seconds(9));
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 1, clock_.Now());
  clock_.Advance(absl::Seconds(9));
  EXPECT_FALSE(d.Hung(clock_.Now()).has_value());
  d.OnRankEnded(0);
  clock_.Advance(absl::Hours(1));
  EXPECT_FALSE(d.Hung(clock_.Now()).has_value());
}

TEST_F(HangDetectorTest, OutOfRangeAndLateBeaconsChangeNothing) {
  HangDetector d(1, Config(10), clock_.Now());
  d.OnBeacon(-1, RANK_ACTIVITY_DATA, 1, clock_.Now());
  d.OnBeacon(1, RANK_ACTIVITY_DATA, 1, clock_.Now());
  clock_.Advance(absl::Seconds(5));
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 1, clock_.Now() - absl::Seconds(30));  // older than start
  clock_.Advance(absl::Seconds(5));
  auto hung = d.Hung(clock_.Now());
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->stalled_for, absl::Seconds(10));
}

TEST_F(HangDetectorTest, StalledWithAShorterThresholdForDisplay) {
  HangDetector d(2, Config(60), clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_DATA, 4, clock_.Now());
  d.OnBeacon(1, RANK_ACTIVITY_BACKWARD, 4, clock_.Now());
  clock_.Advance(absl::Seconds(7));
  auto s = d.Stalled(clock_.Now(), absl::Seconds(5));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 0);  // data comes before backward
  EXPECT_EQ(s->timeout, absl::Seconds(60));
  EXPECT_FALSE(d.Hung(clock_.Now()).has_value());
  EXPECT_EQ(d.LongestStall(clock_.Now()), absl::Seconds(7));
  d.OnBeacon(0, RANK_ACTIVITY_FORWARD, 4, clock_.Now());
  EXPECT_EQ(d.LongestStall(clock_.Now()), absl::Seconds(7));
  d.OnRankEnded(1);
  EXPECT_EQ(d.LongestStall(clock_.Now()), absl::ZeroDuration());
}

TEST_F(HangDetectorTest, StartupPhaseNames) {
  EXPECT_EQ(StartupPhaseName(mt::v1::RANK_PHASE_UNSPECIFIED, mt::v1::RANK_ACTIVITY_UNSPECIFIED),
            "not started (its trainer never reported)");
  EXPECT_EQ(StartupPhaseName(mt::v1::RANK_PHASE_STARTING, mt::v1::RANK_ACTIVITY_UNSPECIFIED),
            "starting (joining the rendezvous and process groups, building the model and data)");
  EXPECT_EQ(StartupPhaseName(mt::v1::RANK_PHASE_STARTING, RANK_ACTIVITY_LOAD),
            "loading a checkpoint");
  EXPECT_EQ(StartupPhaseName(mt::v1::RANK_PHASE_TRAINING, mt::v1::RANK_ACTIVITY_UNSPECIFIED),
            "ready to train (waiting for the others)");
}

// A rank that never reaches training is caught from the placement on, with the floor.
TEST_F(HangDetectorTest, ARankThatNeverStartsIsBlamedAtTheFloorFromThePlacement) {
  HangDetector d(3, Config(10), clock_.Now());  // placed
  clock_.Advance(absl::Seconds(1));
  d.OnPhase(0, mt::v1::RANK_PHASE_STARTING, clock_.Now());
  d.OnPhase(2, mt::v1::RANK_PHASE_STARTING, clock_.Now());
  clock_.Advance(absl::Seconds(2));
  d.OnPhase(2, mt::v1::RANK_PHASE_TRAINING, clock_.Now());  // ready, waits for the others
  clock_.Advance(absl::Seconds(6));  // rank 1: 9 s since the placement, silent
  EXPECT_FALSE(d.Hung(clock_.Now()).has_value());
  clock_.Advance(absl::Seconds(1));
  auto hung = d.Hung(clock_.Now());
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->rank, 1);
  EXPECT_EQ(hung->phase, mt::v1::RANK_PHASE_UNSPECIFIED);
  EXPECT_EQ(hung->stalled_for, absl::Seconds(10));
  EXPECT_EQ(hung->timeout, absl::Seconds(10));
}

// All three started; rank 0 and 2 got through to training and wait in a collective for rank 1,
// stuck before (e.g. building its data): rank 1 is blamed, although it reported after rank 0.
TEST_F(HangDetectorTest, TheRankStillStartingIsBlamedNotThoseWaitingForIt) {
  HangDetector d(3, Config(10), clock_.Now());
  d.OnPhase(0, mt::v1::RANK_PHASE_STARTING, clock_.Now());
  clock_.Advance(absl::Milliseconds(500));
  d.OnPhase(1, mt::v1::RANK_PHASE_STARTING, clock_.Now());
  d.OnPhase(2, mt::v1::RANK_PHASE_STARTING, clock_.Now());
  clock_.Advance(absl::Milliseconds(500));
  d.OnPhase(0, mt::v1::RANK_PHASE_TRAINING, clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_COLLECTIVE, 0, clock_.Now());
  d.OnPhase(2, mt::v1::RANK_PHASE_TRAINING, clock_.Now());
  clock_.Advance(absl::Seconds(10));
  auto hung = d.Hung(clock_.Now());
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->rank, 1);
  EXPECT_EQ(hung->phase, mt::v1::RANK_PHASE_STARTING);
  EXPECT_EQ(StartupPhaseName(hung->phase, hung->activity),
            "starting (joining the rendezvous and process groups, building the model and data)");
  // A repeated phase is no move; an unknown rank or phase changes nothing.
  d.OnPhase(1, mt::v1::RANK_PHASE_STARTING, clock_.Now());
  d.OnPhase(1, mt::v1::RANK_PHASE_UNSPECIFIED, clock_.Now());
  d.OnPhase(5, mt::v1::RANK_PHASE_TRAINING, clock_.Now());
  EXPECT_EQ(d.Hung(clock_.Now())->rank, 1);
  // Its move to training is progress.
  d.OnPhase(1, mt::v1::RANK_PHASE_TRAINING, clock_.Now());
  EXPECT_EQ(d.Hung(clock_.Now())->rank, 2);  // of those silent long, the one outside collectives
}

// Loading a checkpoint at startup has the save/load timeout, for every rank.
TEST_F(HangDetectorTest, LoadingAtStartupHasTheSaveLoadTimeout) {
  HangDetector d(2, Config(10, 10, 100), clock_.Now());
  d.OnPhase(0, mt::v1::RANK_PHASE_STARTING, clock_.Now());
  d.OnPhase(1, mt::v1::RANK_PHASE_STARTING, clock_.Now());
  d.OnBeacon(0, RANK_ACTIVITY_LOAD, 40, clock_.Now());
  clock_.Advance(absl::Seconds(99));
  EXPECT_FALSE(d.Hung(clock_.Now()).has_value());
  clock_.Advance(absl::Seconds(1));
  auto hung = d.Hung(clock_.Now());
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->timeout, absl::Seconds(100));
  EXPECT_EQ(hung->rank, 1);  // same phase; no load beacon yet, so at step 0, behind rank 0
}

}  // namespace
}  // namespace mt::coordinator
