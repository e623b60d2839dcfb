// Hang detection for one attempt of one job: pure, clock-free (the caller passes `now`).
//
// Ranks send progress beacons (worker/report/progress_beacon.h); each beacon means the rank
// moved (its step or activity changed). A rank is stalled from its last beacon, or from the
// moment the attempt started RUNNING (Rebase) when that came later. The job is hung when some
// rank has been stalled for the job's timeout:
//
//   timeout = save_load_timeout            while any rank saves or loads a checkpoint (the
//                                          others wait for it in collectives)
//           = max(k x p99 step time, floor) otherwise
//
// p99 is over the last kStepWindow step times, which the detector derives from the beacons
// (the time between a rank's step changes, divided by the steps it advanced; intervals with a
// save, load or evaluation are left out); before any step time is known the timeout is the
// floor.
//
// Startup: the detector watches an attempt from its placement on, so a rank that never reaches
// training (its process never reports, it hangs joining the rendezvous and process groups, in
// building its model and data, or in loading) is caught with the same timeout: the floor, or
// save_load_timeout while a rank loads. Phase reports (OnPhase: STARTING, TRAINING) are moves.
//
// Who is blamed: the others wait for the rank that is behind. Once some rank has been stalled
// for the timeout, the suspects are the ranks stalled for at least half of it; the detector
// names, in this order of preference, a suspect in the earliest phase (not reported < starting
// < training or later: a rank that has not started holds up those waiting for it in the
// rendezvous), the one at the lowest step, within that step one outside collectives, the
// earliest activity (data, forward, backward, optimizer, save, eval: the proto's order), the
// one stalled the longest, the lowest rank. The step comes before "in a collective": what a
// rank does after step s is labelled s (its stop vote, saves, evaluation) and step s + 1's
// work s + 1, so a rank in a collective of step s while another is in step s + 1 is stuck in
// a collective the others have left (its process stopped before it took their data).
//
// Thread-compatible: the job manager calls it under its lock.
#ifndef MT_COORDINATOR_JOBS_HANG_DETECTOR_H_
#define MT_COORDINATOR_JOBS_HANG_DETECTOR_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "mt/v1/job_spec.pb.h"
#include "mt/v1/worker_service.pb.h"

namespace mt::coordinator {

struct HangConfig {
  absl::Duration floor = absl::Seconds(60);
  double step_multiplier = 10;
  absl::Duration save_load_timeout = absl::Seconds(1800);
  // From a defaulted spec's restart policy.
  static HangConfig FromSpec(const mt::v1::RestartPolicy& restart);
};

// A rank that has not moved, with what it was doing.
struct Stall {
  int rank = 0;
  // Its last reported phase (UNSPECIFIED = none yet: its process never reported).
  mt::v1::RankPhase phase = mt::v1::RANK_PHASE_UNSPECIFIED;
  mt::v1::RankActivity activity = mt::v1::RANK_ACTIVITY_UNSPECIFIED;
  int64_t step = 0;  // the step of its last beacon (0 = none yet)
  absl::Duration stalled_for;
  absl::Duration timeout;  // the job's timeout at the time
};

// "forward", "collective", ... ; "unknown" for UNSPECIFIED.
std::string ActivityName(mt::v1::RankActivity activity);
// What a rank that has not reached training was doing, for events: "not started (its trainer
// never reported)", "starting (joining the rendezvous and process groups, building the model
// and data)", "loading a checkpoint", or "ready to train (waiting for the others)".
std::string StartupPhaseName(mt::v1::RankPhase phase, mt::v1::RankActivity activity);

class HangDetector {
 public:
  static constexpr int kStepWindow = 200;

  // `world_size` ranks, each stalled from `start`.
  HangDetector(int world_size, HangConfig config, absl::Time start);

  // A beacon of `rank` (ignored when out of range or the rank ended).
  void OnBeacon(int rank, mt::v1::RankActivity activity, int64_t step, absl::Time now);
  // The rank reported `phase` (a move when it changes; ignored like beacons otherwise).
  void OnPhase(int rank, mt::v1::RankPhase phase, absl::Time now);
  // The rank ended (finished, failed or stopped): it is no longer watched.
  void OnRankEnded(int rank);
  // Stalls count from `now` at the earliest (the attempt started RUNNING).
  void Rebase(absl::Time now);

  // The p99 of the recent step times; 0 when none is known.
  absl::Duration P99StepTime() const;
  // The job's timeout now (see the header comment).
  absl::Duration Timeout() const;
  // When some rank has been stalled for at least `at_least`: the rank to blame among those
  // stalled for at least half of it (see the header comment); else nullopt.
  std::optional<Stall> Stalled(absl::Time now, absl::Duration at_least) const;
  // How long the rank stalled the longest (ranks still watched) has been; 0 with none.
  absl::Duration LongestStall(absl::Time now) const;
  // Stalled(now, Timeout()).
  std::optional<Stall> Hung(absl::Time now) const { return Stalled(now, Timeout()); }

 private:
  struct Rank {
    bool ended = false;
    mt::v1::RankPhase phase = mt::v1::RANK_PHASE_UNSPECIFIED;
    mt::v1::RankActivity activity = mt::v1::RANK_ACTIVITY_UNSPECIFIED;
    int64_t step = 0;
    absl::Time last_beacon;
    // When the rank's step last changed, and to what.
    int64_t timed_step = 0;
    absl::Time step_since = absl::InfinitePast();
    // The rank saved, loaded or evaluated since step_since: that interval is no step time.
    bool saved_or_evaluated = false;
  };
  void AddStepTime(absl::Duration d);

  const HangConfig config_;
  std::vector<Rank> ranks_;
  std::deque<absl::Duration> step_times_;
};

}  // namespace mt::coordinator

#endif  // MT_COORDINATOR_JOBS_HANG_DETECTOR_H_
