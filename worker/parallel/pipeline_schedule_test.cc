// The pipeline schedule tables, exhaustively over p <= 8 stages, m <= 16 micro-batches and
// v <= 4 model chunks: coverage, order, a simulated execution with blocking (and overlapped)
// send/recv that never deadlocks and delivers every tensor where it is expected, Megatron's
// activation bound, and the bubble against (p-1)/(v*m + p-1). Exact integer arithmetic: no
// tolerance.
#include "worker/parallel/pipeline_schedule.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::parallel {
namespace {

using ::mt::testing::StatusIs;
using ::testing::HasSubstr;

using Tables = std::vector<std::vector<PipelineAction>>;

constexpr int kMaxStages = 8;
constexpr int kMaxMicroBatches = 16;
constexpr int kMaxChunks = 4;

bool Valid(int p, int m, int v) { return v == 1 || (p > 1 && m % p == 0); }

// Every valid (p, m, v) in range, training and forward-only.
std::vector<PipelineScheduleSpec> AllSpecs(bool forward_only) {
  std::vector<PipelineScheduleSpec> out;
  for (int p = 1; p <= kMaxStages; ++p) {
    for (int m = 1; m <= kMaxMicroBatches; ++m) {
      for (int v = 1; v <= kMaxChunks; ++v) {
        if (Valid(p, m, v)) out.push_back({p, m, v, forward_only});
      }
    }
  }
  return out;
}

std::string Name(const PipelineScheduleSpec& s) {
  return absl::StrCat("p=", s.num_stages, " m=", s.num_micro_batches, " v=", s.num_chunks,
                      s.forward_only ? " forward-only" : "");
}

Tables MustBuild(const PipelineScheduleSpec& spec) {
  absl::StatusOr<Tables> tables = PipelineSchedule(spec);
  EXPECT_TRUE(tables.ok()) << Name(spec) << ": " << tables.status();
  return tables.ok() ? *tables : Tables();
}

TEST(PipelineScheduleTest, EveryStageForwardsAndBackwardsEachMicroBatchAndChunkOnceForwardFirst) {
  for (bool forward_only : {false, true}) {
    for (const PipelineScheduleSpec& spec : AllSpecs(forward_only)) {
      const Tables tables = MustBuild(spec);
      ASSERT_EQ(tables.size(), static_cast<size_t>(spec.num_stages)) << Name(spec);
      for (int s = 0; s < spec.num_stages; ++s) {
        std::map<std::pair<int, int>, int> forward_at, backward_at;
        for (size_t i = 0; i < tables[s].size(); ++i) {
          const PipelineAction& a = tables[s][i];
          const std::pair<int, int> w{a.micro_batch, a.chunk};
          if (a.type == PipelineAction::Type::kForward) {
            EXPECT_TRUE(forward_at.emplace(w, i).second) << Name(spec) << " stage " << s;
          } else if (a.type == PipelineAction::Type::kBackward) {
            EXPECT_TRUE(backward_at.emplace(w, i).second) << Name(spec) << " stage " << s;
          } else {
            EXPECT_FALSE(a.ops.empty());
          }
        }
        ASSERT_EQ(forward_at.size(), static_cast<size_t>(spec.num_micro_batches * spec.num_chunks))
            << Name(spec) << " stage " << s;
        ASSERT_EQ(backward_at.size(), forward_only ? 0u : forward_at.size())
            << Name(spec) << " stage " << s;
        for (const auto& [w, at] : backward_at) {
          ASSERT_TRUE(forward_at.count(w));
          EXPECT_LT(forward_at[w], at) << Name(spec) << " stage " << s;
        }
        for (const auto& [w, at] : forward_at) {
          EXPECT_GE(w.first, 0);
          EXPECT_LT(w.first, spec.num_micro_batches);
          EXPECT_GE(w.second, 0);
          EXPECT_LT(w.second, spec.num_chunks);
        }
      }
    }
  }
}

// Blocking send/recv (Megatron's batches) and overlapped (post early, wait late), with equal
// and with 1:2 forward:backward costs: never a deadlock, every send meets the receive that
// expects its tensor on the right stage, every input there before it is used.
TEST(PipelineScheduleTest, SimulatedExecutionNeverDeadlocksAndDeliversEveryTensor) {
  for (bool forward_only : {false, true}) {
    for (const PipelineScheduleSpec& spec : AllSpecs(forward_only)) {
      const Tables tables = MustBuild(spec);
      for (bool overlap : {false, true}) {
        for (int64_t backward_time : {1, 2}) {
          SimulationOptions o;
          o.overlap = overlap;
          o.backward_time = backward_time;
          absl::StatusOr<SimulationResult> r = Simulate(spec, tables, o);
          ASSERT_TRUE(r.ok()) << Name(spec) << " overlap " << overlap << ": " << r.status();
        }
      }
    }
  }
}

TEST(PipelineScheduleTest, ActivationsInFlightReachMegatronsBoundAndNeverExceedIt) {
  for (const PipelineScheduleSpec& spec : AllSpecs(false)) {
    const Tables tables = MustBuild(spec);
    absl::StatusOr<SimulationResult> r = Simulate(spec, tables);
    ASSERT_TRUE(r.ok()) << r.status();
    for (int s = 0; s < spec.num_stages; ++s) {
      const int bound = MaxInFlightActivations(spec, s);
      EXPECT_EQ(r->max_in_flight[s], bound) << Name(spec) << " stage " << s;
      if (spec.num_chunks == 1) {
        EXPECT_EQ(bound, std::min(spec.num_stages - s, spec.num_micro_batches)) << Name(spec);
      }
    }
  }
}

// The idle share of every stage is exactly (p-1)/(v*m + p-1), whatever the backward costs
// relative to the forward, blocking or overlapped: idle * (v*m + p-1) == makespan * (p-1).
TEST(PipelineScheduleTest, IdleTimeOfEveryStageIsTheTheoreticalBubble) {
  for (const PipelineScheduleSpec& spec : AllSpecs(false)) {
    const Tables tables = MustBuild(spec);
    const int64_t p = spec.num_stages;
    const int64_t vm = static_cast<int64_t>(spec.num_micro_batches) * spec.num_chunks;
    for (int64_t backward_time : {1, 2, 3}) {
      for (bool overlap : {false, true}) {
        SimulationOptions o;
        o.backward_time = backward_time;
        o.overlap = overlap;
        absl::StatusOr<SimulationResult> r = Simulate(spec, tables, o);
        ASSERT_TRUE(r.ok()) << r.status();
        // The critical path: fill the pipeline with forwards, drain it with backwards.
        EXPECT_EQ(r->makespan, (vm + p - 1) * (1 + backward_time)) << Name(spec);
        for (int s = 0; s < spec.num_stages; ++s) {
          EXPECT_EQ(r->busy[s], vm * (1 + backward_time));
          EXPECT_EQ(r->idle(s) * (vm + p - 1), r->makespan * (p - 1))
              << Name(spec) << " stage " << s << " backward_time " << backward_time;
        }
        EXPECT_DOUBLE_EQ(
            static_cast<double>(r->idle(0)) / static_cast<double>(r->makespan),
            TheoreticalBubbleFraction(spec.num_stages, spec.num_micro_batches, spec.num_chunks));
      }
    }
  }
}

TEST(PipelineScheduleTest, ForwardOnlyStreamsThroughThePipelineHoldingNothing) {
  for (const PipelineScheduleSpec& spec : AllSpecs(true)) {
    absl::StatusOr<SimulationResult> r = Simulate(spec, MustBuild(spec));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->makespan, spec.num_micro_batches * spec.num_chunks + spec.num_stages - 1)
        << Name(spec);
    for (int s = 0; s < spec.num_stages; ++s) EXPECT_EQ(r->max_in_flight[s], 0);
  }
}

// Megatron's tables, written out for small cases (see schedules.py).
TEST(PipelineScheduleTest, SmallTablesAreMegatrons) {
  const PipelineScheduleSpec one_f_one_b{3, 4, 1, false};
  EXPECT_EQ(ScheduleString(*StageSchedule(one_f_one_b, 0)),
            "F0.0 [sA0.0>1] F1.0 [sA1.0>1] F2.0 [sA2.0>1 rG0.0<1] B0.0 F3.0 [sA3.0>1 rG1.0<1] "
            "B1.0 [rG2.0<1] B2.0 [rG3.0<1] B3.0");
  EXPECT_EQ(ScheduleString(*StageSchedule(one_f_one_b, 1)),
            "[rA0.0<0] F0.0 [sA0.0>2] [rA1.0<0] F1.0 [sA1.0>2 rG0.0<2] B0.0 [rA2.0<0 sG0.0>0] "
            "F2.0 [sA2.0>2 rG1.0<2] B1.0 [rA3.0<0 sG1.0>0] F3.0 [sA3.0>2 rG2.0<2] B2.0 "
            "[sG2.0>0] [rG3.0<2] B3.0 [sG3.0>0]");
  EXPECT_EQ(ScheduleString(*StageSchedule(one_f_one_b, 2)),
            "[rA0.0<1] F0.0 B0.0 [rA1.0<1 sG0.0>1] F1.0 B1.0 [rA2.0<1 sG1.0>1] F2.0 B2.0 "
            "[rA3.0<1 sG2.0>1] F3.0 B3.0 [sG3.0>1]");
  // Interleaved, p=2 v=2 m=4: groups of p micro-batches per chunk; 2(p-s-1) + (v-1)p warm-up
  // forwards on stage s.
  const PipelineScheduleSpec interleaved{2, 4, 2, false};
  EXPECT_EQ(ScheduleString(*StageSchedule(interleaved, 0)),
            "F0.0 [sA0.0>1] F1.0 [sA1.0>1 rA0.1<1] F0.1 [sA0.1>1 rA1.1<1] F1.1 [sA1.1>1 rG0.1<1] "
            "F2.0 B0.1 [sA2.0>1 sG0.1>1 rG1.1<1] F3.0 B1.1 [sA3.0>1 rA2.1<1 sG1.1>1 rG0.0<1] "
            "F2.1 B0.0 [sA2.1>1 rA3.1<1 rG1.0<1] F3.1 B1.0 [sA3.1>1 rG2.1<1] B2.1 "
            "[sG2.1>1 rG3.1<1] B3.1 [sG3.1>1 rG2.0<1] B2.0 [rG3.0<1] B3.0");
  EXPECT_EQ(ScheduleString(*StageSchedule(interleaved, 1)),
            "[rA0.0<0] F0.0 [sA0.0>0 rA1.0<0] F1.0 [sA1.0>0 rA0.1<0] F0.1 B0.1 "
            "[rA1.1<0 sG0.1>0] F1.1 B1.1 [rA2.0<0 sG1.1>0 rG0.0<0] F2.0 B0.0 "
            "[sA2.0>0 rA3.0<0 sG0.0>0 rG1.0<0] F3.0 B1.0 [sA3.0>0 rA2.1<0 sG1.0>0] F2.1 B2.1 "
            "[rA3.1<0 sG2.1>0] F3.1 B3.1 [sG3.1>0 rG2.0<0] B2.0 [sG2.0>0 rG3.0<0] B3.0 "
            "[sG3.0>0]");
  EXPECT_EQ(WarmupForwards(interleaved, 0), 4);
  EXPECT_EQ(WarmupForwards(interleaved, 1), 2);
  EXPECT_EQ(ScheduleString(*StageSchedule({1, 2, 1, false}, 0)), "F0.0 B0.0 F1.0 B1.0");
}

TEST(PipelineScheduleTest, BadSpecsAreRejectedNamingTheFix) {
  EXPECT_THAT(StageSchedule({4, 6, 2, false}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_micro_batches (6) to be a multiple of "
                                 "pipeline_model_parallel_size (4)")));
  EXPECT_THAT(StageSchedule({1, 4, 2, false}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("needs pipeline_model_parallel_size > 1")));
  EXPECT_THAT(StageSchedule({2, 0, 1, false}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least one micro-batch")));
  EXPECT_THAT(StageSchedule({0, 1, 1, false}, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be >= 1")));
  EXPECT_THAT(StageSchedule({2, 2, 1, false}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the pipeline")));
  // m not a multiple of p is fine without interleaving.
  EXPECT_TRUE(StageSchedule({4, 6, 1, false}, 0).ok());
}

// The simulator is the oracle of the tests above: it must catch broken tables.
TEST(PipelineScheduleSimulatorTest, CatchesADeadlock) {
  const PipelineScheduleSpec spec{2, 1, 1, false};
  // Both stages first wait to receive from the other.
  Tables t(2);
  t[0] = {PipelineAction::Communicate({{P2PKind::kRecvGradient, 1, 0, 0}}),
          PipelineAction::Forward(0, 0),
          PipelineAction::Communicate({{P2PKind::kSendActivation, 1, 0, 0}}),
          PipelineAction::Backward(0, 0)};
  t[1] = {PipelineAction::Communicate({{P2PKind::kRecvActivation, 0, 0, 0}}),
          PipelineAction::Forward(0, 0), PipelineAction::Backward(0, 0),
          PipelineAction::Communicate({{P2PKind::kSendGradient, 0, 0, 0}})};
  EXPECT_THAT(Simulate(spec, t), StatusIs(absl::StatusCode::kFailedPrecondition,
                                          HasSubstr("deadlock: stage 0 waits at action 0")));
  // Each op a batch of its own, sends first (blocking send/recv without batch_isend_irecv):
  // in the steady state both stages send and wait for the other to receive.
  const PipelineScheduleSpec two{2, 2, 1, false};
  Tables split = MustBuild(two);
  for (auto& stage : split) {
    std::vector<PipelineAction> unbatched;
    for (const PipelineAction& a : stage) {
      if (a.type != PipelineAction::Type::kCommunicate) {
        unbatched.push_back(a);
        continue;
      }
      for (bool sends : {true, false}) {
        for (const P2POp& op : a.ops) {
          if (op.is_send() == sends) unbatched.push_back(PipelineAction::Communicate({op}));
        }
      }
    }
    stage = unbatched;
  }
  EXPECT_THAT(Simulate(two, split),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("deadlock")));
}

TEST(PipelineScheduleSimulatorTest, CatchesATensorMeetingTheWrongReceive) {
  const PipelineScheduleSpec spec{2, 2, 1, true};
  Tables t = MustBuild(spec);
  // Stage 1 expects micro-batch 1 first.
  t[1] = {PipelineAction::Communicate({{P2PKind::kRecvActivation, 0, 1, 0}}),
          PipelineAction::Forward(1, 0),
          PipelineAction::Communicate({{P2PKind::kRecvActivation, 0, 0, 0}}),
          PipelineAction::Forward(0, 0)};
  EXPECT_THAT(Simulate(spec, t),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("stage 0 sends the activation of micro-batch 0 between virtual "
                                 "stages 0 and 1 (action 1) where stage 1 receives the activation "
                                 "of micro-batch 1")));
}

TEST(PipelineScheduleSimulatorTest, CatchesMissingInputsWorkAndPeers) {
  const PipelineScheduleSpec spec{2, 2, 1, false};
  const Tables good = MustBuild(spec);
  ASSERT_TRUE(Simulate(spec, good).ok());

  Tables no_recv = good;  // stage 1 computes before receiving
  std::swap(no_recv[1][0], no_recv[1][1]);
  EXPECT_THAT(Simulate(spec, no_recv),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("runs the forward of 0.0 without receiving its input")));

  Tables missing = good;  // stage 0 drops its last backward
  for (size_t i = missing[0].size(); i-- > 0;) {
    if (missing[0][i].type == PipelineAction::Type::kBackward) {
      missing[0].erase(missing[0].begin() + static_cast<long>(i));
      break;
    }
  }
  EXPECT_THAT(Simulate(spec, missing),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("backwards, expected 2")));

  Tables wrong_peer = good;
  for (PipelineAction& a : wrong_peer[0]) {
    for (P2POp& op : a.ops) op.peer = 0;
  }
  EXPECT_THAT(Simulate(spec, wrong_peer),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("lives on stage 1")));

  Tables early_send = good;  // stage 0 sends before computing
  std::swap(early_send[0][0], early_send[0][1]);
  EXPECT_THAT(Simulate(spec, early_send),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("before its forward")));
}

}  // namespace
}  // namespace mt::parallel
