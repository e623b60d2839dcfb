#include "coordinator/jobs/hang_detector.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"

namespace mt::coordinator {
namespace {

bool SavesOrLoads(mt::v1::RankActivity a) {
  return a == mt::v1::RANK_ACTIVITY_SAVE || a == mt::v1::RANK_ACTIVITY_LOAD;
}

// Phases before training are ordered; training, evaluating and checkpointing are one.
int PhaseOrder(mt::v1::RankPhase p) {
  return std::min(static_cast<int>(p), static_cast<int>(mt::v1::RANK_PHASE_TRAINING));
}

}  // namespace

std::string StartupPhaseName(mt::v1::RankPhase phase, mt::v1::RankActivity activity) {
  if (activity == mt::v1::RANK_ACTIVITY_LOAD) return "loading a checkpoint";
  switch (phase) {
    case mt::v1::RANK_PHASE_UNSPECIFIED:
      return "not started (its trainer never reported)";
    case mt::v1::RANK_PHASE_STARTING:
      return "starting (joining the rendezvous and process groups, building the model and data)";
    default:
      return "ready to train (waiting for the others)";
  }
}

HangConfig HangConfig::FromSpec(const mt::v1::RestartPolicy& restart) {
  HangConfig c;
  c.floor = absl::Seconds(restart.hang_timeout_floor_seconds());
  c.step_multiplier = restart.hang_step_multiplier();
  c.save_load_timeout = absl::Seconds(restart.save_load_timeout_seconds());
  return c;
}

std::string ActivityName(mt::v1::RankActivity activity) {
  if (activity == mt::v1::RANK_ACTIVITY_UNSPECIFIED || !mt::v1::RankActivity_IsValid(activity)) {
    return "unknown";
  }
  // "RANK_ACTIVITY_FORWARD" -> "forward".
  return absl::AsciiStrToLower(
      absl::StripPrefix(mt::v1::RankActivity_Name(activity), "RANK_ACTIVITY_"));
}

HangDetector::HangDetector(int world_size, HangConfig config, absl::Time start)
    : config_(config), ranks_(static_cast<size_t>(std::max(world_size, 0))) {
  for (Rank& r : ranks_) r.last_beacon = start;
}

void HangDetector::OnBeacon(int rank, mt::v1::RankActivity activity, int64_t step, absl::Time now) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size()) || ranks_[rank].ended) return;
  Rank& r = ranks_[rank];
  r.activity = activity;
  r.step = step;
  r.last_beacon = std::max(r.last_beacon, now);
  if (step > r.timed_step) {
    if (r.step_since != absl::InfinitePast() && r.timed_step > 0 && !r.saved_or_evaluated) {
      AddStepTime((now - r.step_since) / static_cast<double>(step - r.timed_step));
    }
    r.timed_step = step;
    r.step_since = now;
    r.saved_or_evaluated = false;
  }
  if (SavesOrLoads(activity) || activity == mt::v1::RANK_ACTIVITY_EVAL) {
    r.saved_or_evaluated = true;
  }
}

void HangDetector::OnPhase(int rank, mt::v1::RankPhase phase, absl::Time now) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size()) || ranks_[rank].ended) return;
  if (phase == mt::v1::RANK_PHASE_UNSPECIFIED || phase == ranks_[rank].phase) return;
  ranks_[rank].phase = phase;
  ranks_[rank].last_beacon = std::max(ranks_[rank].last_beacon, now);
}

void HangDetector::OnRankEnded(int rank) {
  if (rank >= 0 && rank < static_cast<int>(ranks_.size())) ranks_[rank].ended = true;
}

void HangDetector::Rebase(absl::Time now) {
  for (Rank& r : ranks_) r.last_beacon = std::max(r.last_beacon, now);
}

void HangDetector::AddStepTime(absl::Duration d) {
  if (d < absl::ZeroDuration()) return;
  step_times_.push_back(d);
  if (step_times_.size() > kStepWindow) step_times_.pop_front();
}

absl::Duration HangDetector::P99StepTime() const {
  if (step_times_.empty()) return absl::ZeroDuration();
  std::vector<absl::Duration> sorted(step_times_.begin(), step_times_.end());
  std::sort(sorted.begin(), sorted.end());
  // Nearest rank: the smallest value with at least 99% of the values at or below it.
  const size_t n = sorted.size();
  const size_t index = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(n))) - 1;
  return sorted[std::min(index, n - 1)];
}

absl::Duration HangDetector::Timeout() const {
  const bool save_load = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) {
    return !r.ended && SavesOrLoads(r.activity);
  });
  if (save_load) return std::max(config_.save_load_timeout, config_.floor);
  return std::max(config_.floor, P99StepTime() * config_.step_multiplier);
}

absl::Duration HangDetector::LongestStall(absl::Time now) const {
  absl::Duration longest = absl::ZeroDuration();
  for (const Rank& r : ranks_) {
    if (!r.ended) longest = std::max(longest, now - r.last_beacon);
  }
  return longest;
}

std::optional<Stall> HangDetector::Stalled(absl::Time now, absl::Duration at_least) const {
  const bool any = std::any_of(ranks_.begin(), ranks_.end(), [&](const Rank& r) {
    return !r.ended && now - r.last_beacon >= at_least;
  });
  if (!any) return std::nullopt;
  const absl::Duration timeout = Timeout();
  std::optional<Stall> blamed;
  // Smaller is more to blame: (phase, step, in a collective, activity within the step, stalled
  // less long, rank). Phases and activities are numbered in their order (proto).
  auto key = [](const Stall& s) {
    return std::make_tuple(PhaseOrder(s.phase), s.step,
                           s.activity == mt::v1::RANK_ACTIVITY_COLLECTIVE,
                           static_cast<int>(s.activity), -s.stalled_for, s.rank);
  };
  for (int i = 0; i < static_cast<int>(ranks_.size()); ++i) {
    const Rank& r = ranks_[i];
    // A rank that moved within the last half of `at_least` is no suspect.
    if (r.ended || now - r.last_beacon < at_least / 2) continue;
    const Stall s{i, r.phase, r.activity, r.step, now - r.last_beacon, timeout};
    if (!blamed.has_value() || key(s) < key(*blamed)) blamed = s;
  }
  return blamed;
}

}  // namespace mt::coordinator
